"""Data in and out: exports of stored runs and importers of other tools' results."""
