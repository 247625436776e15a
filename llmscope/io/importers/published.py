"""Published per-item results stored as runs (`llmscope import worldsense | results | answers`).

- `import worldsense DIR`: `DIR/trials.jsonl.bz2` as the `worldsense` suite and every
  `DIR/results/<prompting>___<model>___results.jsonl` ({"Key", "resp"}) as a run.
- `import results FILE...`: commonsense `results_raw_q{1,2,3}.jsonl` files
  ({"id", "prompt", "response": {yes, no, other} | "text"}) as one run per model folder.
- `import answers FILE...`: answer sets (`{"model_answers": {qid: [answers...]}}`) as runs on
  the `cfc` suite, one per file and answer set.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from llmscope.data.safety import MAX_INT
from llmscope.data.suites import Suite, SuiteError, gc_paused, load_suite, read_jsonl
from llmscope.engine.answers import match_answer
from llmscope.engine.tasks.constrained import class_correct
from llmscope.engine.types import Result
from llmscope.io.importers.runs import (
    create_import_run,
    finish_import_run,
    import_run_id,
    run_exists,
    store_suite,
)
from llmscope.store.db import Store, decode_json

# 19+ digits (also inside fractions, exponents and strings: a false alarm costs only the slower parse)
_LONG_INT = re.compile(rb"[0-9]{19,}")
# a line with nothing but whitespace (bytes.strip's), the last line included
_BLANK_LINE = re.compile(rb"(?:^|\n)[ \t\r\x0b\x0c]*(?:\n|$)")


def _ints_fit_orjson(raw: bytes) -> bool:
    """Whether every long integer in `raw` is one orjson reads exactly (WorldSense keys are
    19-digit int64 values: checking them is ~100x cheaper than parsing with the stdlib)."""
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
    if not _ints_fit_orjson(
        raw
    ):  # orjson reads integers beyond 64 bits as floats; the stdlib keeps them
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


def _json_text(v: Any) -> str:
    """The JSON text the store writes for `v` (so bulk-imported rows equal row-by-row ones)."""
    return orjson.dumps(v).decode()


# One results line that DuckDB's JSON reader (`_PLAIN_LINES`) reads into the values orjson and
# the loop in `_import_worldsense_files` take from it: "Key" a canonical integer (its text is
# the id: no leading zero, no -0), "resp" a string with no escape and no control character,
# nothing else. A file with any other line (or a BOM, CR, a blank line, an integer beyond
# int64, invalid UTF-8) goes to `fast_jsonl`, so its errors name file, line and field as before.
_PLAIN_LINE = (
    rb'[ \t]*\{[ \t]*"Key"[ \t]*:[ \t]*(?:0|-?[1-9][0-9]{0,18})[ \t]*,'
    rb'[ \t]*"resp"[ \t]*:[ \t]*"[^"\\\x00-\x1f]*"[ \t]*\}[ \t]*'
)
_PLAIN_FILE = re.compile(rb"(?:" + _PLAIN_LINE + rb"\n)*" + _PLAIN_LINE + rb"\n?")

# The lines of a plain results file with their line numbers (row_number() OVER () counts a
# table function's rows in the order of its source: the file's lines)
_PLAIN_LINES = (
    "SELECT row_number() OVER () AS ln, Key AS key, resp FROM read_json(?, format = 'newline_delimited', "
    "columns = {Key: 'VARCHAR', resp: 'VARCHAR'}, auto_detect = false, compression = 'none')"
)
# ... each with its trial's answers (`known`: the key is a trial of the suite)
_PLAIN_JOINED = (
    f"SELECT s.ln, s.key, s.resp, i.item_id IS NOT NULL AS known, i.gold, i.options "
    f"FROM ({_PLAIN_LINES}) s LEFT JOIN items i ON i.suite_id = ? AND i.item_id = s.key"
)


def is_plain_results(raw: bytes) -> bool:
    """Whether every line of a results file has the plain shape DuckDB's reader takes exactly."""
    if _PLAIN_FILE.fullmatch(raw) is None or not _ints_fit_orjson(raw):
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read_results(path: Path) -> list[tuple[int, dict[str, Any]]] | None:
    """A results file's records, or None when it is plain (`is_plain_results`): DuckDB reads it."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return fast_jsonl(path)  # its reader names the defect
    return None if is_plain_results(raw) else fast_jsonl(path)


def import_worldsense(store: Store, directory: Path) -> list[str]:
    """Load the WorldSense test set and every results file in `directory/results`.

    The new runs are written in one transaction (a bad results file or a killed import leaves
    none of them; the suite's items, stored first, stay), through the store's bulk paths: a
    plain results file is read by DuckDB and inserted by SQL (`Store.append_results_sql`),
    any other is parsed in Python (`fast_jsonl`) and appended as columns.
    """
    with gc_paused():  # 10^5 items and their columns: the collector would walk them again and again
        return _import_worldsense(store, directory)


def _import_worldsense(store: Store, directory: Path) -> list[str]:
    suite = load_suite("worldsense", directory)
    files = sorted((Path(directory) / "results").glob("*___results.jsonl"))
    with ThreadPoolExecutor(1) as pool:
        # The results files are checked (and parsed, unless plain) in a second thread while the
        # trials are read (the regex check and orjson hold the GIL: they take turns with the
        # trials' parse, and are done by the time the results are inserted).
        parsed = {
            f: pool.submit(_read_results, f)
            for f in files
            if not run_exists(store, import_run_id("worldsense", suite.suite_id, f.name))
        }
        try:
            return _import_worldsense_files(store, suite, directory, files, parsed)
        finally:
            for fut in parsed.values():
                fut.cancel()  # after an error: files not yet parsed are not read at all


_Parsed = list[tuple[int, dict[str, Any]]] | None


def _import_worldsense_files(
    store: Store,
    suite: Suite,
    directory: Path,
    files: list[Path],
    parsed: dict[Path, Future[_Parsed]],
) -> list[str]:
    # The suite id hashes the trials file's bytes; when the store holds that suite already,
    # its items come from the store instead of decompressing the bz2 file again (~5 s).
    fresh = None
    if not store.has_suite(suite.suite_id):
        fresh = suite.items()
        store_suite(store, suite)
        n_items = len(fresh)
    else:
        row = store.execute(
            "SELECT count(*) FROM items WHERE suite_id = ?", [suite.suite_id]
        ).fetchone()
        n_items = int(row[0]) if row else 0
    # item_id -> (gold, options): only for a results file parsed in Python
    answers: dict[str, tuple[str | None, Any]] | None = None

    def items() -> dict[str, tuple[str | None, Any]]:
        nonlocal answers
        if answers is None:
            # options as tuples, as `item_answers` gives them (hashable: responses are scored once per pair)
            answers = (
                store.item_answers(suite.suite_id)
                if fresh is None
                else {
                    it.item_id: (it.gold, None if it.options is None else tuple(it.options))
                    for it in fresh
                }
            )
        return answers

    msgs = [f"suite {suite.suite_id}: {n_items} trials"]
    variant = suite.variant_names()[0]
    classes = dict(suite.task_options.get("equivalent") or {})
    if not files:
        msgs.append(
            f"no results files matching {directory}/results/<prompting>___<model>___results.jsonl"
        )
    # one transaction for every new run: a bad file leaves none of them behind
    with store.transaction():
        for f in files:
            prompting, model, _ = f.name.split("___")
            run_id = import_run_id("worldsense", suite.suite_id, f.name)
            if f not in parsed:
                msgs.append(f"{f.name}: already imported as run {run_id}")
                continue
            recs = parsed[f].result()
            # The per-row extra has two possible values: encode each once.
            extra_text = {
                v: _json_text({"imported": True, "prompting": prompting, "valid": v})
                for v in (True, False)
            }
            create_import_run(store, run_id, suite, model, f, n_items, {"prompting": prompting})
            if recs is None:
                n, unknown, dupes = _append_plain(
                    store, suite.suite_id, run_id, f, variant, classes, extra_text
                )
            else:
                n, unknown, dupes = _append_parsed(
                    store, suite.suite_id, run_id, f, recs, items(), variant, classes, extra_text
                )
            meta = {
                "imported_from": str(f),
                "prompting": prompting,
                "unknown_keys": unknown,
                "suite": suite.describe(),
            }
            if dupes:
                meta["duplicate_keys"] = dupes
            store.update_run(run_id, meta=meta)
            finish_import_run(store, run_id)
            msgs.append(
                f"{f.name}: run {run_id} ({model}, {prompting}), {n} responses"
                + (f", {unknown} keys not in the test set" if unknown else "")
                + (f", {dupes} repeated keys ignored (first kept)" if dupes else "")
            )
    return msgs


def _score(
    resp: str, gold: str | None, options: Any, classes: dict[str, str], extra_text: dict[bool, str]
) -> tuple[float | None, str]:
    """(correct, extra) of a stripped response to a trial with this gold and these options."""
    return (None if gold is None else class_correct(resp, gold, classes)), extra_text[
        resp in (options or ())
    ]


def _append_parsed(
    store: Store,
    suite_id: str,
    run_id: str,
    f: Path,
    recs: list[tuple[int, dict[str, Any]]],
    items: dict[str, tuple[str | None, Any]],
    variant: str,
    classes: dict[str, str],
    extra_text: dict[bool, str],
) -> tuple[int, int, int]:
    """A results file parsed in Python, appended as columns; (rows, unknown keys, repeated keys)."""
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
            done = scored[(resp, ans)] = _score(resp, ans[0], ans[1], classes, extra_text)
        keys.append(key)
        preds.append(resp)
        golds.append(ans[0])
        correct.append(done[0])
        extras.append(done[1])
    # each row's prompt is its trial's text, the stored item's: readers take it from there
    # (the row stores NULL rather than a fourth copy of 70 MB of text)
    cols: dict[str, list[Any]] = {
        "item_id": keys,
        "variant": [variant] * len(keys),
        "prediction": preds,
        "gold": golds,
        "correct": correct,
        "extra": extras,
        # the extras name no choice method: no need for the store to decode them to find out
        "choice_method": [None] * len(keys),
    }
    store.append_results(run_id, cols, prompt_from_suite=suite_id)
    return len(keys), unknown, dupes


_SCORED_SCHEMA = pa.schema(
    [
        ("resp", pa.string()),
        ("gold", pa.string()),
        ("options", pa.string()),
        ("prediction", pa.string()),
        ("correct", pa.float64()),
        ("extra", pa.string()),
    ]
)


def _append_plain(
    store: Store,
    suite_id: str,
    run_id: str,
    f: Path,
    variant: str,
    classes: dict[str, str],
    extra_text: dict[bool, str],
) -> tuple[int, int, int]:
    """A plain results file read and inserted by DuckDB, rows equal to `_append_parsed`'s: a
    key's first line counts, unknown keys are skipped; each distinct (response, gold, options)
    is scored once in Python and joined back. (rows, unknown keys, repeated keys)."""
    path = str(f)
    row = store.execute(
        f"SELECT count(*) FILTER (WHERE NOT known), "
        f"count(*) FILTER (WHERE known) - count(DISTINCT key) FILTER (WHERE known) "
        f"FROM ({_PLAIN_JOINED})",
        [path, suite_id],
    ).fetchone()
    unknown, dupes = (int(row[0]), int(row[1])) if row else (0, 0)
    pairs = store.execute(
        f"SELECT DISTINCT resp, gold, options FROM ({_PLAIN_JOINED}) WHERE known", [path, suite_id]
    ).fetchall()
    decoded = {o: decode_json(o) for o in {p[2] for p in pairs}}
    cols: dict[str, list[Any]] = {name: [] for name in _SCORED_SCHEMA.names}
    for resp, gold, options in pairs:
        opts = decoded[options]
        pred = str(resp).strip()
        correct, extra = _score(
            pred, gold, tuple(opts) if isinstance(opts, list) else opts, classes, extra_text
        )
        for name, v in zip(
            _SCORED_SCHEMA.names, (resp, gold, options, pred, correct, extra), strict=True
        ):
            cols[name].append(v)
    scored = pa.table(cols, schema=_SCORED_SCHEMA)
    select = (
        f"SELECT j.key AS item_id, ? AS variant, row_number() OVER (ORDER BY j.ln) - 1 AS seq, "
        f"c.prediction, j.gold, c.correct, c.extra, NULL AS choice_method "
        f"FROM ({_PLAIN_JOINED} QUALIFY known AND row_number() OVER (PARTITION BY s.key ORDER BY s.ln) = 1) j "
        f"JOIN _llmscope_scored c ON c.resp = j.resp AND c.gold IS NOT DISTINCT FROM j.gold "
        f"AND c.options IS NOT DISTINCT FROM j.options"
    )
    n = store.append_results_sql(
        run_id,
        select,
        [variant, path, suite_id],
        prompt_from_suite=suite_id,
        tables={"_llmscope_scored": scored},
    )
    return n, unknown, dupes


def _response_probs(
    resp: Any, path: Path, line: int
) -> tuple[dict[str, float] | None, float | None, str | None]:
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
    by_model: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        if not f.is_file():
            raise SuiteError("file not found", f)
        by_model[f.parent.name].append(f)
    msgs = []
    for model, paths in sorted(by_model.items()):
        run_id = import_run_id("results", suite.suite_id, model, *sorted(p.name for p in paths))
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
                rows.append(
                    Result(
                        item_id=w.item.item_id,
                        variant=variant,
                        prompt=rec.get("prompt") or w.prompt,
                        probs=probs,
                        other=other,
                        prediction=pred,
                        gold=w.gold,
                        correct=correct,
                        confidence=conf,
                        extra={
                            "imported": True,
                            **(
                                {"response_text": rec["response"]}
                                if text_answer is not None or isinstance(rec.get("response"), str)
                                else {}
                            ),
                        },
                    )
                )
        store_suite(store, suite)  # once a file is read whole: a refused one writes nothing
        # One transaction per model: the run, its rows and its final counts, or nothing.
        with store.transaction():
            create_import_run(
                store,
                run_id,
                suite,
                model,
                paths[0].parent,
                len(work),
                {"files": [p.name for p in paths]},
            )
            store.write_results(run_id, rows, start_seq=0)
            if dupes:
                store.update_run(
                    run_id,
                    meta={
                        "imported_from": str(paths[0].parent),
                        "suite": suite.describe(),
                        "duplicate_keys": dupes,
                    },
                )
            finish_import_run(store, run_id)
        msgs.append(
            f"{model}: run {run_id}, {len(rows)} results from {len(paths)} files"
            + (f" ({mismatched} prompts differ from the suite's)" if mismatched else "")
            + (f", {dupes} repeated ids ignored (first kept)" if dupes else "")
        )
    return msgs


def import_answer_sets(
    store: Store, files: list[Path], suite_path: str | None = None, model: str | None = None
) -> list[str]:
    """Pre-generated answer sets `{"model_answers": {question_id: [answers...]}}` as runs on the
    `cfc` suite, so human samples can be scored by ProbEval as if they were a model."""
    suite = load_suite("cfc", suite_path)
    items = {it.item_id: it for it in suite.items()}
    variant = suite.variant_names()[0]
    msgs = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise SuiteError(f"cannot read answer sets: {e}", f) from e
        sets = data.get("model_answers") if isinstance(data, dict) else None
        if not isinstance(sets, dict):
            raise SuiteError(
                'expected {"model_answers": {question_id: [answers...]}}', f, 1, "model_answers"
            )
        known = [q for q in sets if str(q) in items]
        if not known:
            raise SuiteError(
                f"none of the {len(sets)} question ids ({', '.join(sorted(map(str, sets))[:3])}, ...) are in "
                f"the suite's targets file {suite.items_path}; pass the matching targets with --suite-path",
                f,
                1,
                "model_answers",
            )
        name = model if (model and len(files) == 1) else f.stem
        run_id = import_run_id("answers", suite.suite_id, f.name, name)
        store_suite(store, suite)  # once the file is read: a refused one writes nothing
        if not create_import_run(
            store, run_id, suite, name, f, len(items), {"answer_sets": f.name}
        ):
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
            results.append(
                Result(
                    item_id=it.item_id,
                    variant=variant,
                    prompt=it.text,
                    prediction=texts[0] if texts else None,
                    extra={"imported": True, "samples": [{"text": t} for t in texts]},
                )
            )
        store.write_results(run_id, results)
        finish_import_run(store, run_id)
        from llmscope.report import probeval_for_run

        run = store.get_run(run_id)
        res = probeval_for_run(store, run, save=True) if run else None
        kl = ""
        if res is not None:
            how = res.settings.describe() if res.settings is not None else ""
            kl = f", ProbEval KL {res.mean_kl:.3f} ({how})" + (f"; {res.note}" if res.note else "")
        msgs.append(
            f"{f.name}: run {run_id} ({name}), {len(results)} questions"
            + (f", {skipped} ids not in the suite" if skipped else "")
            + kl
        )
    return msgs
