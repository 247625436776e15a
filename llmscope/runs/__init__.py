"""Starting and following a run: settings and trusted endpoints, plans, item filters, the live channel."""
