"""The metrics pipeline's producers, one module per family; analysis/metrics.py registers them.

Each family module defines its producers and a ``register()`` that adds them to the registry;
the pipeline core (:mod:`llmscope.analysis.metrics`) calls every family's ``register()`` in
report order, so importing the core alone yields the whole pipeline.
"""

# The core first: a family module imported on its own (a test, a figure) then finds the
# registry complete, every family registered once and in the core's order.
import llmscope.analysis.metrics  # noqa: F401
