"""`llmscope import`: published per-item results stored as runs, so the same report,
comparison and TUI apply to them.

- `import worldsense DIR`: `DIR/trials.jsonl.bz2` as the `worldsense` suite and every
  `DIR/results/<prompting>___<model>___results.jsonl` ({"Key", "resp"}) as a run.
- `import results FILE...`: commonsense `results_raw_q{1,2,3}.jsonl` files
  ({"id", "prompt", "response": {yes, no, other} | "text"}) as one run per model folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

import llmscope
from llmscope.data.safety import MAX_INT
from llmscope.data.suites import Suite, SuiteError, load_suite, read_jsonl
from llmscope.engine.answers import match_answer
from llmscope.engine.tasks.constrained import class_correct
from llmscope.engine.types import Result
from llmscope.store.db import Store


def _run_id(*parts: str) -> str:
    return "imp-" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]


def _store_suite(store: Store, suite: Suite) -> None:
    store.add_suite(suite.suite_id, suite.name, suite.task, suite.spec, suite.source or "", suite.items())


def _create_import_run(store: Store, run_id: str, suite: Suite, model: str, source: Path,
                       n_total: int, options: dict[str, Any]) -> bool:
    """Create the run; False when it was imported before (re-importing adds nothing)."""
    if store.get_run(run_id) is not None:
        return False
    store.create_run({
        "run_id": run_id, "suite_id": suite.suite_id, "suite_name": suite.name, "task": suite.task,
        "model": model, "model_path": str(source), "backend": "import", "seed": None,
        "options": {"import": options}, "versions": {"llmscope": llmscope.__version__},
        "meta": {"imported_from": str(source), "suite": suite.describe()}, "config_hash": run_id,
        "n_total": n_total, "status": "running",
    })
    return True


def _finish(store: Store, run_id: str) -> None:
    import datetime as dt

    n, err = store.count_results(run_id)
    store.update_run(run_id, status="completed", n_done=n, n_errors=err,
                     ended_at=dt.datetime.now(dt.UTC).replace(tzinfo=None))


# 19+ digits (also inside fractions, exponents and strings: a false alarm costs only the slower parse)
_LONG_INT = re.compile(rb"[0-9]{19,}")
# a line with nothing but whitespace (bytes.strip's), the last line included
_BLANK_LINE = re.compile(rb"(?:^|\n)[ \t\r\x0b\x0c]*(?:\n|$)")


def _ints_fit_orjson(raw: bytes) -> bool:
    """Whether every long integer in `raw` is one orjson reads exactly (WorldSense keys are
    19-digit int64 values: checking them is ~100x cheaper than the stdlib parse they used to cause)."""
    # orjson reads [-2**63, 2**64-1] exactly; accepting only what `read_jsonl` accepts keeps its errors.
    # Only 20+ digits or 19 starting with 9 can reach 2**63 (9.22e18): int() just for those.
    return all(int(m) < MAX_INT for m in _LONG_INT.findall(raw) if len(m) > 19 or m[0] == 57)


def fast_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """`read_jsonl`'s records parsed with orjson (~5x faster on results files).

    Any line orjson refuses (or a non-object) hands the whole file to `read_jsonl`, which
    accepts what the stdlib accepts (NaN, big integers) and reports the first defect with its
    file and line exactly as before.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return read_jsonl(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if not _ints_fit_orjson(raw):  # orjson reads integers beyond 64 bits as floats; the stdlib keeps them
        return read_jsonl(path)
    loads = orjson.loads
    body = raw[:-1] if raw.endswith(b"\n") else raw
    try:
        if _BLANK_LINE.search(body) is None:
            # no blank line: record k is on line k, so no per-line bookkeeping
            recs = [loads(line) for line in body.split(b"\n")]
            if not all(isinstance(r, dict) for r in recs):
                return read_jsonl(path)
            return list(zip(range(1, len(recs) + 1), recs, strict=True))
        out: list[tuple[int, dict[str, Any]]] = []
        for n, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            rec = loads(line)
            if not isinstance(rec, dict):
                return read_jsonl(path)
            out.append((n, rec))
    except orjson.JSONDecodeError:
        return read_jsonl(path)
    return out


def _stored_answers(store: Store, suite_id: str) -> dict[str, tuple[str | None, Any]] | None:
    """item_id -> (gold, options) of a suite as stored, or None when not stored."""
    if not store.has_suite(suite_id):
        return None
    return store.item_answers(suite_id)


def _json_text(v: Any) -> str:
    """The JSON text the store writes for `v` (so bulk-imported rows equal row-by-row ones)."""
    return orjson.dumps(v).decode()


def import_worldsense(store: Store, directory: Path) -> list[str]:
    """Load the WorldSense test set and every results file in `directory/results`.

    Each results file becomes one run written in one transaction through the store's
    columnar bulk path (no `Result` object per row): a killed import leaves no partial run.
    """
    suite = load_suite("worldsense", directory)
    files = sorted((Path(directory) / "results").glob("*___results.jsonl"))
    with ThreadPoolExecutor(1) as pool:
        # The results files are parsed in a second thread while the trials are read: the bz2
        # decompression releases the GIL, so the two overlap on a second core.
        parsed = {f: pool.submit(fast_jsonl, f) for f in files
                  if store.get_run(_run_id("worldsense", suite.suite_id, f.name)) is None}
        try:
            return _import_worldsense_files(store, suite, directory, files, parsed)
        finally:
            for fut in parsed.values():
                fut.cancel()  # after an error: files not yet parsed are not read at all


def _import_worldsense_files(store: Store, suite: Suite, directory: Path, files: list[Path],
                             parsed: dict[Path, Future[list[tuple[int, dict[str, Any]]]]]) -> list[str]:
    # The suite id hashes the trials file's bytes; when the store holds that suite already,
    # its items come from the store instead of decompressing the bz2 file again (~5 s).
    items = _stored_answers(store, suite.suite_id)
    if items is None:
        # options as tuples, as `item_answers` gives them (hashable: responses are scored once per pair)
        items = {it.item_id: (it.gold, None if it.options is None else tuple(it.options)) for it in suite.items()}
        _store_suite(store, suite)
    msgs = [f"suite {suite.suite_id}: {len(items)} trials"]
    variant = suite.variant_names()[0]
    classes = dict(suite.task_options.get("equivalent") or {})
    if not files:
        msgs.append(f"no results files matching {directory}/results/<prompting>___<model>___results.jsonl")
    for f in files:
        prompting, model, _ = f.name.split("___")
        run_id = _run_id("worldsense", suite.suite_id, f.name)
        if f not in parsed:
            msgs.append(f"{f.name}: already imported as run {run_id}")
            continue
        recs = parsed[f].result()
        # The per-row extra has two possible values: encode each once.
        extra_text = {v: _json_text({"imported": True, "prompting": prompting, "valid": v})
                      for v in (True, False)}
        keys: list[str] = []
        preds: list[str] = []
        golds: list[str | None] = []
        correct: list[float | None] = []
        extras: list[str] = []
        seen: set[str] = set()
        unknown = dupes = 0
        # (response, (gold, options)) -> (correct, extra): a results file repeats a few dozen
        # distinct responses over 87k trials, so each is scored once
        scored: dict[tuple[str, tuple[str | None, Any]], tuple[float | None, str]] = {}
        for n, rec in recs:
            if "Key" not in rec:
                raise SuiteError("missing Key", f, n, "Key")
            key = str(rec["Key"])
            ans = items.get(key)
            if ans is None:
                unknown += 1
                continue
            if key in seen:  # the first response to a trial counts, as the keyed store did
                dupes += 1
                continue
            seen.add(key)
            resp = rec.get("resp")
            resp = "" if resp is None else str(resp).strip()
            done = scored.get((resp, ans))
            if done is None:
                gold, options = ans
                done = scored[(resp, ans)] = (None if gold is None else class_correct(resp, gold, classes),
                                              extra_text[resp in (options or ())])
            keys.append(key)
            preds.append(resp)
            golds.append(ans[0])
            correct.append(done[0])
            extras.append(done[1])
        meta = {"imported_from": str(f), "prompting": prompting, "unknown_keys": unknown,
                "suite": suite.describe()}
        if dupes:
            meta["duplicate_keys"] = dupes
        with store.transaction():
            _create_import_run(store, run_id, suite, model, f, len(items), {"prompting": prompting})
            # each row's prompt is its trial's text, the stored item's: readers take it from
            # there (the row stores NULL rather than a fourth copy of 70 MB of text)
            cols: dict[str, list[Any]] = {
                "item_id": keys, "variant": [variant] * len(keys),
                "prediction": preds, "gold": golds, "correct": correct, "extra": extras,
                # the extras name no choice method: no need for the store to decode them to find out
                "choice_method": [None] * len(keys),
            }
            store.append_results(run_id, cols, prompt_from_suite=suite.suite_id)
            store.update_run(run_id, meta=meta)
            _finish(store, run_id)
        msgs.append(f"{f.name}: run {run_id} ({model}, {prompting}), {len(keys)} responses"
                    + (f", {unknown} keys not in the test set" if unknown else "")
                    + (f", {dupes} repeated keys ignored (first kept)" if dupes else ""))
    return msgs


def _response_probs(resp: Any, path: Path, line: int) -> tuple[dict[str, float] | None, float | None, str | None]:
    if isinstance(resp, dict):
        try:
            y, n = float(resp["yes"]), float(resp["no"])
        except (KeyError, TypeError, ValueError) as e:
            raise SuiteError("response needs numeric yes and no", path, line, "response") from e
        other = float(resp["other"]) if "other" in resp else 1.0 - y - n
        return {"yes": y, "no": n}, other, None
    if isinstance(resp, str):
        first = re.split(r"\s+", resp.strip(), maxsplit=1)[0] if resp.strip() else ""
        return None, None, match_answer(first, ["yes", "no"])
    raise SuiteError("response must be {yes, no, other} or a text answer", path, line, "response")


def import_results(store: Store, files: list[Path], suite_path: str | None = None) -> list[str]:
    """Published commonsense results (one file per prompt variant) as one run per model."""
    suite = load_suite("commonsense", suite_path)
    work = {(w.item.item_id, w.variant): w for w in suite.work()}
    _store_suite(store, suite)
    by_model: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        if not f.is_file():
            raise SuiteError("file not found", f)
        by_model[f.parent.name].append(f)
    msgs = []
    for model, paths in sorted(by_model.items()):
        run_id = _run_id("results", suite.suite_id, model, *sorted(p.name for p in paths))
        if store.get_run(run_id) is not None:
            msgs.append(f"{model}: already imported as run {run_id}")
            continue
        mismatched = dupes = 0
        seen: set[tuple[str, str]] = set()
        rows: list[Result] = []
        for p in sorted(paths):
            m = re.search(r"(q\d)", p.name)
            if not m:
                raise SuiteError("cannot tell the prompt variant (q1/q2/q3) from the file name", p)
            variant = m.group(1)
            for n, rec in fast_jsonl(p):
                if "id" not in rec:
                    raise SuiteError("missing id", p, n, "id")
                w = work.get((str(rec["id"]), variant))
                if w is None:
                    raise SuiteError(f"id {rec['id']} / {variant} is not in the suite", p, n, "id")
                probs, other, text_answer = _response_probs(rec.get("response"), p, n)
                if (w.item.item_id, variant) in seen:  # the first line of a key counts
                    dupes += 1
                    continue
                seen.add((w.item.item_id, variant))
                if rec.get("prompt") is not None and rec["prompt"] != w.prompt:
                    mismatched += 1
                pred: str | None
                if probs is not None:
                    pred = "yes" if probs["yes"] > probs["no"] else "no"
                    mass = probs["yes"] + probs["no"]
                    conf = (probs[pred] / mass) if mass > 0 else None
                else:
                    pred, conf = text_answer, None
                correct = None if w.gold is None else float(pred == w.gold)
                rows.append(Result(
                    item_id=w.item.item_id, variant=variant, prompt=rec.get("prompt") or w.prompt,
                    probs=probs, other=other, prediction=pred, gold=w.gold, correct=correct,
                    confidence=conf, extra={"imported": True,
                                            **({"response_text": rec["response"]} if text_answer is not None
                                               or isinstance(rec.get("response"), str) else {})},
                ))
        # One transaction per model: the run, its rows and its final counts, or nothing.
        with store.transaction():
            _create_import_run(store, run_id, suite, model, paths[0].parent, len(work),
                               {"files": [p.name for p in paths]})
            store.write_results(run_id, rows, start_seq=0)
            if dupes:
                store.update_run(run_id, meta={"imported_from": str(paths[0].parent), "suite": suite.describe(),
                                               "duplicate_keys": dupes})
            _finish(store, run_id)
        msgs.append(f"{model}: run {run_id}, {len(rows)} results from {len(paths)} files"
                    + (f" ({mismatched} prompts differ from the suite's)" if mismatched else "")
                    + (f", {dupes} repeated ids ignored (first kept)" if dupes else ""))
    return msgs


def import_answer_sets(store: Store, files: list[Path], suite_path: str | None = None,
                       model: str | None = None) -> list[str]:
    """Pre-generated answer sets `{"model_answers": {question_id: [answers...]}}` as runs on the
    `cfc` suite, so human samples can be scored by ProbEval as if they were a model."""
    suite = load_suite("cfc", suite_path)
    items = {it.item_id: it for it in suite.items()}
    _store_suite(store, suite)
    variant = suite.variant_names()[0]
    msgs = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise SuiteError(f"cannot read answer sets: {e}", f) from e
        sets = data.get("model_answers") if isinstance(data, dict) else None
        if not isinstance(sets, dict):
            raise SuiteError('expected {"model_answers": {question_id: [answers...]}}', f, 1, "model_answers")
        known = [q for q in sets if str(q) in items]
        if not known:
            raise SuiteError(
                f"none of the {len(sets)} question ids ({', '.join(sorted(map(str, sets))[:3])}, ...) are in "
                f"the suite's targets file {suite.items_path}; pass the matching targets with --suite-path",
                f, 1, "model_answers")
        name = model if (model and len(files) == 1) else f.stem
        run_id = _run_id("answers", suite.suite_id, f.name, name)
        if not _create_import_run(store, run_id, suite, name, f, len(items), {"answer_sets": f.name}):
            msgs.append(f"{f.name}: already imported as run {run_id}")
            continue
        results = []
        skipped = 0
        for qid, answers in sets.items():
            it = items.get(str(qid))
            if it is None or not isinstance(answers, list):
                skipped += 1
                continue
            texts = [str(a) for a in answers]
            results.append(Result(
                item_id=it.item_id, variant=variant, prompt=it.text, prediction=texts[0] if texts else None,
                extra={"imported": True, "samples": [{"text": t} for t in texts]},
            ))
        store.write_results(run_id, results)
        _finish(store, run_id)
        from llmscope.report import probeval_for_run

        run = store.get_run(run_id)
        res = probeval_for_run(store, run, save=True) if run else None
        kl = f", ProbEval KL {res.mean_kl:.3f}" if res is not None else ""
        msgs.append(f"{f.name}: run {run_id} ({name}), {len(results)} questions"
                    + (f", {skipped} ids not in the suite" if skipped else "") + kl)
    return msgs
