"""The `cfc-choice` suite: CFC clusters as options, cluster counts as human choices.

Its loader lives with the CFC reader (data/cfc.py); this module registers it, after the
other external suites, so suites are listed in the order they were added.
"""

from __future__ import annotations

from llmscope.data.cfc import CHOICE_SPEC, load_cfc_choice_suite
from llmscope.data.registry import SuiteEntry, register_suite

register_suite(
    SuiteEntry(
        "cfc-choice",
        str(CHOICE_SPEC["task"]),
        load_cfc_choice_suite,
        str(CHOICE_SPEC["description"]),
    )
)
