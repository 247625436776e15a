"""Figures for papers and the self-contained HTML page, drawn from the metrics pipeline."""
