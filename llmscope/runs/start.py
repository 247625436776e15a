"""One way to start a run: `llmscope run` (with or without `--plan`), `--resume`, `rerun` and
the TUI's form and resume key all go through `prepare_run` -> `start_run` -> `execute`.

- `prepare_run` (no model loaded): reads and checks the suite and options, finds the stored
  run the request belongs to, and stops with one line when there is nothing to do
  (`RunComplete`) or another process writes that run (`RunBusy`).
- `start_run`: builds the backend from its `BackendConfig`, wrapped in the shared response
  cache (engine/cache.py), and the `Runner` that records the run and appends this session to
  `meta.sessions` (engine/runner.py).
- `execute`: probes the backend (API capabilities) and runs.

A run's identity is what decides what the model answers: suite content, task options, model
and its weights, the backend options that change results, and the seed (engine/runner.py
`RunPlan.config`). `--limit` is not part of it: a limited run is the same run, partly done.
`--limit 20` on a run that holds those 20 results says it is complete; on a run that holds
fewer it scores the missing ones; without `--limit` the whole suite is asked for. Before a
model is loaded, a request is matched to a stored run by its *request key* (the same inputs,
known without loading: the model file's hash, not a hub model's revision), stored with the
run as `options.request_key`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from llmscope.engine.config import BackendConfig, ConfigError
from llmscope.engine.runner import RunBusy


class RunComplete(Exception):
    """The run asked for already holds every result asked for: nothing is loaded or written."""

    def __init__(self, message: str, run_id: str, n_errors: int = 0, n_asked: int = 0) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.n_errors = n_errors  # asked-for results stored as errors (kept by --no-retry-errors)
        self.n_asked = n_asked  # results asked for (all stored)


@dataclass
class RerunOf:
    """A rerun: items of `run` selected by `where` (llmscope/cli/rerun.py), scored as a new run."""

    run: dict[str, Any]
    where: str
    item_ids: list[str]


@dataclass
class RunRequest:
    """What a user asked for, from any front end (CLI flags, the TUI form, a resume, a rerun)."""

    suite_name: str | None = None
    suite_path: str | None = None
    config: BackendConfig = field(default_factory=BackendConfig)
    task_options: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None
    resume: str | None = None  # continue this stored run (id or prefix) with its stored config
    # On resume: the config fields given (flags), laid over the run's stored config; `config`
    # is then ignored. A change that alters what the run measures is refused.
    overrides: dict[str, Any] = field(default_factory=dict)
    retry_errors: bool = True
    cache: bool = True  # the shared response cache (also off with $LLMSCOPE_RESPONSE_CACHE=off)
    plan: tuple[dict[str, Any], str, str] | None = None  # (plan body, its hash, its path)
    rerun: RerunOf | None = None
    model_arg: str | None = (
        None  # recorded model argument when it differs from config.model (rerun)
    )
    # Other prompt templates: the run scores the derived suite `<suite>~<level>`
    # (data/derived.py); a resume or rerun of such a run derives it again from the run's record.
    templates: Any = None  # data.derived.Derivation


@dataclass
class PreparedRun:
    """A checked request: the suite, the resolved config and the stored run it continues (if any)."""

    request: RunRequest
    suite: Any  # data.suites.Suite
    config: BackendConfig
    task_options: dict[str, Any]
    limit: int | None
    request_key: str
    existing: (
        dict[str, Any] | None
    )  # the stored run this request continues, when known before loading
    n_asked: int  # results asked for (work units: item x variant)
    n_have: int  # of those, stored (without error, unless errors are kept)


@dataclass
class StartedRun:
    prepared: PreparedRun
    runner: Any  # engine.runner.Runner
    backend: Any
    plan: Any  # engine.runner.RunPlan


def task_identity(suite: Any, task_opts: dict[str, Any]) -> dict[str, Any]:
    """The task part of a run's identity (as `RunPlan.config` records it), without a model."""
    from llmscope.engine.runner import RunPlan

    desc = (
        RunPlan(suite=suite, model_label="", model_arg=None, task_options=task_opts)
        .task()
        .describe()
    )
    desc.pop("templates", None)
    return dict(json.loads(json.dumps(desc, default=str)))


def _urls(u: Any) -> Any:
    if isinstance(u, list):  # several endpoints: one is the same as a one-element list
        u = [str(x).rstrip("/") for x in u]
        return u[0] if len(u) == 1 else u
    return (u or "").rstrip("/") or None


def refuse_identity_change(
    run: dict[str, Any],
    stored: BackendConfig,
    cfg: BackendConfig,
    suite: Any,
    task_opts: dict[str, Any],
) -> None:
    """A resume may change speed (concurrency, batch size...) but not what the model answers."""
    norm = [dataclasses.replace(c, base_url=_urls(c.base_url)) for c in (stored, cfg)]
    diffs = norm[0].differences(norm[1])
    stored_task = (run.get("options") or {}).get("task")
    if isinstance(stored_task, dict):
        new_task = task_identity(suite, task_opts)
        for k in sorted(set(stored_task) | set(new_task)):
            if stored_task.get(k) != new_task.get(k):
                diffs.append(f"task.{k}: {stored_task.get(k)!r} -> {new_task.get(k)!r}")
    if diffs:
        raise ConfigError(
            f"resuming run {run['run_id']} with these options would change what it measures: "
            + "; ".join(diffs)
            + ". Drop those flags to continue it, or start a new run without --resume."
        )


def request_key(suite: Any, cfg: BackendConfig, task_opts: dict[str, Any]) -> str:
    """The inputs that decide a run's results, known before any model loads."""
    from llmscope.engine.models import describe_source, parse_model

    ident = cfg.identity()
    if cfg.kind == "openai":
        ident["base_url"] = _urls(
            cfg.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        )
    try:
        model_hash = describe_source(parse_model(cfg.model)).get("model_hash")
    except Exception:  # an unreadable model file: the load reports it
        model_hash = None
    blob = json.dumps(
        {
            "suite_id": suite.suite_id,
            "task": task_identity(suite, task_opts),
            "backend": ident,
            "model_hash": model_hash,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _find_by_key(store: Any, key: str) -> dict[str, Any] | None:
    # A rerun stores the request of the run it re-scores but holds only the chosen items:
    # matched as "the newest run of this request" it hid the finished run, so the same command
    # loaded the model to score nothing.
    row = store.execute(
        "SELECT run_id FROM runs WHERE json_extract_string(options, '$.request_key') = ? "
        "AND json_extract_string(meta, '$.rerun_of.run_id') IS NULL "
        "ORDER BY started_at DESC LIMIT 1",
        [key],
    ).fetchone()
    return store.get_run(str(row[0])) if row else None


def _stored_derived(store: Any, name: str) -> tuple[str | None, str | None, Any] | None:
    """`--suite commonsense-sample~terse` names a derived suite stored in this database (no file
    holds it): its parent (as the suite's runs found it) and templates. None when the name is
    a built-in suite or a file, or no derived suite of that name is stored."""
    from pathlib import Path

    from llmscope.data.derived import SEP, Derivation
    from llmscope.engine.config import resume_inputs
    from llmscope.store.db import decode_json

    if SEP not in name or Path(name).exists():
        return None
    found: dict[str, tuple[str | None, str | None, Any]] = {}
    for sid, raw in store.execute(
        "SELECT suite_id, spec FROM suites WHERE name = ? AND suite_id IN (SELECT suite_id FROM runs)",
        [name],
    ).fetchall():
        spec = decode_json(raw) if isinstance(raw, str) else raw
        d = spec.get("derived_from") if isinstance(spec, dict) else None
        if not isinstance(d, dict) or not isinstance(d.get("level"), str):
            continue
        row = store.execute(
            "SELECT run_id FROM runs WHERE suite_id = ? ORDER BY started_at DESC LIMIT 1", [sid]
        ).fetchone()
        rin = resume_inputs(store.get_run(str(row[0])) or {})
        found[str(sid)] = (
            rin.suite_name,
            rin.suite_path,
            Derivation(d["level"], spec["templates"]),
        )
    if len(found) > 1:
        raise ConfigError(
            f"{store.path} holds {len(found)} suites named {name!r} ({', '.join(sorted(found))}): "
            "give the templates with --suite PARENT --templates FILE"
        )
    return next(iter(found.values()), None)


def prepare_run(store: Any, req: RunRequest) -> PreparedRun:
    """Check a request and find the run it continues, loading no model (see the module doc).

    Raises ConfigError / SuiteError / TaskOptionError for bad input, RunComplete when the run
    holds every result asked for, RunBusy when another live process writes it."""
    from llmscope.data.derived import apply as apply_templates
    from llmscope.data.derived import derivation_of_run
    from llmscope.data.suites import load_suite
    from llmscope.engine.config import resume_inputs
    from llmscope.engine.tasks.options import TaskOptionError, validate_task_options
    from llmscope.store.db import effective_status

    suite_name, suite_path, limit = req.suite_name, req.suite_path, req.limit
    task_opts = dict(req.task_options)
    existing: dict[str, Any] | None = None
    cfg = req.config
    stored_cfg: BackendConfig | None = None
    if req.resume:
        existing = store.find_run(req.resume)
        if existing is None:
            raise ConfigError(f"no run {req.resume!r} in {store.path}")
        rin = resume_inputs(existing)
        suite_name, suite_path = rin.suite_name, rin.suite_path
        task_opts = {**rin.task_options, **task_opts}
        limit = req.limit if req.limit is not None else rin.limit
        stored_cfg = rin.config
        cfg = dataclasses.replace(stored_cfg, **req.overrides)
    if not suite_name:
        raise ConfigError(
            "--suite is required (a built-in name, see `llmscope suites`, or a spec path)"
        )
    cfg, _spec = cfg.resolve()  # flags checked before anything is loaded or written
    derivation = req.templates
    if derivation is None and existing is None and req.rerun is None:
        named = _stored_derived(store, str(suite_name))  # `--suite PARENT~LEVEL`, run before
        if named is not None:
            suite_name, suite_path, derivation = named
    suite = load_suite(suite_name, suite_path)
    if req.templates is not None and (existing is not None or req.rerun is not None):
        raise ConfigError("other templates make another run: give them without --resume")
    suite = apply_templates(
        suite,
        derivation
        or derivation_of_run(existing or (req.rerun.run if req.rerun is not None else {})),
    )
    if req.rerun is not None:
        keep = set(req.rerun.item_ids)
        suite._items = [it for it in suite.items() if it.item_id in keep]
        if suite.suite_id != req.rerun.run["suite_id"]:
            raise ConfigError(
                f"the suite's files changed since run {req.rerun.run['run_id']} ({suite.suite_id} != "
                f"{req.rerun.run['suite_id']}); rerun needs the same items"
            )
    suite.items()  # validate before any model is loaded or anything is written
    if cfg.chat is not None:
        task_opts["chat"] = cfg.chat
    if existing is not None and stored_cfg is not None:
        refuse_identity_change(existing, stored_cfg, cfg, suite, task_opts)
    try:
        validate_task_options(suite.task, {**suite.task_options, **task_opts})
    except TaskOptionError as e:
        raise ConfigError(f"task options (--opt, --chat, suite task_options): {e}") from None
    if (
        cfg.system_prompt
        and existing is None
        and task_identity(suite, task_opts).get("chat") is False
    ):
        # The system prompt reaches a model only through the chat template: a run that scores
        # its prompts without one would record a system prompt it never sent (and a run id of
        # its own for identical requests).
        raise ConfigError(
            f"--system-prompt would not be sent: suite {suite.name!r} scores its prompts without a "
            "chat template (chat: false), and a system prompt is sent only through one; drop it, "
            "or add --chat to score through the template"
        )
    # design options (counterbalancing, few-shot) given with --opt shape the work list too
    suite.task_options = {**suite.task_options, **task_opts}
    suite.work(1)  # validates the design options before the model loads
    key = request_key(suite, cfg, task_opts)
    if existing is None and req.rerun is None:
        existing = _find_by_key(store, key)
    n_asked = n_have = 0
    if existing is not None:
        from llmscope.engine.runner import RunPlan

        plan = RunPlan(
            suite=suite, model_label="", model_arg=None, task_options=task_opts, limit=limit
        )
        asked = {(w.item.item_id, w.variant) for w in suite.work(limit, plan.task().options)}
        rid = str(existing["run_id"])
        cond = "" if not req.retry_errors else " AND error IS NULL"
        have = {
            (str(i), str(v))
            for i, v in store.execute(
                f"SELECT item_id, variant FROM results WHERE run_id = ?{cond}", [rid]
            ).fetchall()
        }
        n_asked, n_have = len(asked), len(asked & have)
        errs = {
            (str(i), str(v))
            for i, v in store.execute(
                "SELECT item_id, variant FROM results WHERE run_id = ? AND error IS NOT NULL", [rid]
            ).fetchall()
        }
        n_err = len(asked & errs)
        status = effective_status(existing)
        if status == "running" and existing.get("owner_pid") != os.getpid():
            raise RunBusy(
                f"run {rid} is being written by process {existing.get('owner_pid')} on "
                f"{existing.get('owner_host')}; watch it with `llmscope view`, or wait for it"
            )
        if n_asked and n_have == n_asked:
            total = int(existing.get("n_total") or 0)
            stored = int(store.count_results(rid)[0])
            whole = (
                f"; the run holds {stored}/{total}"
                if limit is not None and total != n_asked
                else ""
            )
            kept = f", {n_err} of them errors kept by --no-retry-errors" if n_err else ""
            raise RunComplete(
                f"run {rid} is already complete ({n_have}/{n_asked} results asked for{whole}{kept}); nothing to "
                f"score: raise or drop --limit to extend it, `llmscope rerun {rid} --where EXPR` scores items "
                "again as a new run, or change an option (e.g. --seed) for another run",
                rid,
                n_err,
                n_asked,
            )
    return PreparedRun(req, suite, cfg, task_opts, limit, key, existing, n_asked, n_have)


def start_run(
    store: Any, prep: PreparedRun, reporters: list[Any], *, db: str | None = None, warn: Any = None
) -> StartedRun:
    """Load the model (response cache around it) and make the Runner; publishes the live channel.

    `store`: the write connection, or a function that opens it, called once the model is
    loaded, so no other window is locked out of the file while a model loads."""
    from llmscope.engine.cache import with_cache
    from llmscope.engine.config import build_backend
    from llmscope.engine.progress import MultiReporter
    from llmscope.engine.runner import Runner, RunPlan
    from llmscope.runs.live import LiveWriter

    req = prep.request
    built = build_backend(prep.config)
    backend = with_cache(built.backend, enabled=req.cache, warn=warn)
    cfg = built.config
    plan = RunPlan(
        suite=prep.suite,
        model_label=built.spec.display(),
        model_arg=req.model_arg if req.model_arg is not None else cfg.model,
        task_options=prep.task_options,
        backend_identity=built.identity,
        seed=cfg.seed,
        limit=prep.limit,
        run_id=str(prep.existing["run_id"]) if req.resume and prep.existing is not None else None,
        window=max(cfg.batch_size * 4, cfg.concurrency * 2, 8),
        backend_config=cfg.to_dict(),
        retry_errors=req.retry_errors,
        request_key=prep.request_key,
    )
    if req.rerun is not None:
        old = req.rerun
        plan.run_id = hashlib.sha256(
            json.dumps(
                [
                    plan.config(backend.describe().get("model_hash")),
                    old.run["run_id"],
                    old.where,
                    old.item_ids,
                ],
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()[:12]
        plan.meta = {
            "rerun_of": {
                "run_id": old.run["run_id"],
                "where": old.where,
                "n_items": len(old.item_ids),
                "model": old.run.get("model"),
            }
        }
    if callable(store):
        store = store()
    extra: list[Any] = []
    if req.plan is not None:
        from llmscope.runs.plan import PlanRecorder, deviations

        body, digest, path = req.plan
        devs = deviations(
            body,
            suite_id=prep.suite.suite_id,
            model=cfg.model,
            task_options=prep.task_options,
            seed=cfg.seed,
        )
        for d in devs:
            if warn is not None:
                warn(f"run differs from plan {path}: {d}")
        extra.append(PlanRecorder(store, body, digest, path, devs))
    live = LiveWriter(db or store.path, store=store)
    runner = Runner(plan, backend, store, MultiReporter(*extra, *reporters, live))
    return StartedRun(prep, runner, backend, plan)


async def execute(started: StartedRun, info: Any = None) -> Any:
    """Probe the backend (configuration and capabilities, before anything is written), then run.

    `info(text)` hears the scoring method chosen and any fallback; returns the run's Progress."""
    backend, runner = started.backend, started.runner
    try:
        await backend.probe(started.prepared.suite.task, runner.task.options)
        choice = backend.describe().get("method_choice") or {}
        if choice.get("method") and info is not None:
            info(f"method: {choice['method']} ({choice.get('reason')})")
        scoring = backend.describe().get("scoring") or {}
        if (
            scoring.get("loglik_path") == "padded" and info is not None
        ):  # the tree-mask fallback (hf)
            info(f"log-likelihoods: padded path ({scoring.get('reason')})")
        return await runner.run()
    finally:
        await backend.aclose()
