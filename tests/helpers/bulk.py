"""Reading back what the store's bulk paths wrote, and the WorldSense trial records they import.

- STORED_COLS: the `results` columns a stored Result fills (in the order the tests compare them)
- stored_rows: those columns of one run's rows, in `seq` order
- yesno_run: a three-item yes/no run to append rows to
- finished_run: a completed run of a stored suite, to write results under
- ws_trial: one WorldSense `trials.jsonl` record
- ws_dir: a WorldSense release folder (trials file and results files) to import
"""

from __future__ import annotations

import json
from pathlib import Path

from llmscope.store.db import Store

STORED_COLS: tuple[str, ...] = tuple(
    "item_id variant seq prompt probs p_yes p_no other top_tokens option_scores prediction gold"
    " correct confidence n_tokens latency_ms error extra".split()
)


def stored_rows(st: Store, run_id: str, cols: tuple[str, ...] = STORED_COLS) -> list[tuple]:
    """`cols` of the run's results rows, in `seq` order."""
    return st.execute(
        f"SELECT {', '.join(cols)} FROM results WHERE run_id = ? ORDER BY seq", [run_id]
    ).fetchall()


def yesno_run(st: Store, run_id: str) -> None:
    """Create an empty three-item yes/no run `run_id`."""
    st.create_run(
        {
            "run_id": run_id,
            "suite_id": "s",
            "suite_name": "s",
            "task": "yesno",
            "model": "m",
            "n_total": 3,
        }
    )


def finished_run(
    st: Store,
    run_id: str,
    suite_id: str,
    suite_name: str,
    n_total: int,
    task: str = "yesno",
    model: str = "m",
    backend: str = "hf",
) -> None:
    """Record `run_id` as a completed run of the stored suite `suite_id`."""
    st.create_run(
        {
            "run_id": run_id,
            "suite_id": suite_id,
            "suite_name": suite_name,
            "task": task,
            "n_total": n_total,
            "model": model,
            "backend": backend,
            "status": "completed",
        }
    )


def ws_trial(key: int, gold_obf: str, opts: list[str]) -> dict:
    """A WorldSense trial record with answer options `opts` and obfuscated gold `gold_obf`."""
    return {
        "Key": key,
        "expectedresp": opts,
        "goldresp_obfusc": gold_obf,
        "text": f"Trial {key}?",
        "problemname": "Infer.trivial",
        "problemsize": 3,
        "tuple_ID": key // 2,
        "skin": "s",
        "qskin": "q",
        "complexity": 1,
    }


def ws_dir(base: Path, trials: list[dict], results: dict[str, bytes]) -> Path:
    """`base/ws` holding `trials.jsonl` and, per model name, `results/basic___NAME___results.jsonl`."""
    d = base / "ws"
    (d / "results").mkdir(parents=True, exist_ok=True)
    (d / "trials.jsonl").write_text("\n".join(json.dumps(t) for t in trials) + "\n")
    for name, body in results.items():
        (d / "results" / f"basic___{name}___results.jsonl").write_bytes(body)
    return d
