"""Item drill-down: prompts, gold, each variant's distribution and scores, in one or more runs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static

from llmscope.tui.data.live import item_detail_live
from llmscope.tui.data.store import item_detail
from llmscope.tui.messages import ItemLoaded
from llmscope.tui.panels.irt import IrtLoaded, ItemIrt
from llmscope.tui.screens.base import BackScreen
from llmscope.tui.widgets import ItemList, bar, clean, ellipsis, fmt, literal, plain_table

if TYPE_CHECKING:
    from llmscope.tui.screens.dashboard import DashboardScreen


class ItemScreen(BackScreen):
    """Everything about one item: prompts, gold, each variant's distribution and scores."""

    BINDINGS = [
        Binding("n", "step(1)", "Next item"),
        Binding("p", "step(-1)", "Previous item"),
    ]

    def __init__(
        self,
        run_ids: list[str],
        item_id: str,
        *,
        nav: ItemList | None = None,
        dashboard: DashboardScreen | None = None,
        irt_runs: list[str] | None = None,
        irt_scope: str = "",
    ) -> None:
        super().__init__()
        self.run_ids = run_ids
        self.item_id = item_id
        self.nav = nav
        self.dashboard = dashboard
        self.details: list[dict[str, Any]] = []
        # IRT (tui/panels/irt.py): fitted over `irt_runs` (a study's runs of the suite) or else
        # every run of the suite, once per screen in a worker; stepping items re-reads the fit
        self.irt_runs = irt_runs
        self.irt_scope = irt_scope
        self.irt: ItemIrt | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="item-head")
        with VerticalScroll(id="item-body"):
            yield Static("", id="item-irt")
            yield Static("loading ...", id="item-content")
            yield Static("", id="item-irt-note")
        yield Footer()

    def on_mount(self) -> None:
        self.load()
        self.load_irt()
        self.query_one("#item-body").focus()

    @work(thread=True, exclusive=True, exit_on_error=False, group="item-irt")
    def load_irt(self) -> IrtLoaded:
        """The suite's IRT fit (blocking: read and fit here, shown by `on_irt_loaded`)."""
        from llmscope.store.db import StoreError
        from llmscope.tui.panels.irt import item_irt

        d = self.dashboard
        if d is not None and d.source == "live":
            return IrtLoaded(ItemIrt(None, "IRT: shown for stored runs (this run is live)", ""))
        try:
            with self.llm_app.handle.use() as store:
                return IrtLoaded(item_irt(store, self.run_ids[0], self.irt_runs, self.irt_scope))
        except StoreError as e:
            return IrtLoaded(ItemIrt(None, f"IRT: cannot read the file: {e}", ""))

    def on_irt_loaded(self, msg: IrtLoaded) -> None:
        self.irt = msg.result
        self._show_irt()

    def _show_irt(self) -> None:
        from llmscope.tui.panels.irt import render_item_irt

        # a fit leads the drill-down; why there is none is one line at its end
        res = self.irt
        fitted = res is not None and res.fit is not None
        top, note = self.query_one("#item-irt", Static), self.query_one("#item-irt-note", Static)
        top.display, note.display = fitted, res is not None and not fitted
        top.update(render_item_irt(res, self.item_id) if fitted else "")
        note.update(render_item_irt(res, self.item_id) if note.display else "")

    @work(thread=True, exclusive=True, exit_on_error=False, group="item")
    def load(self) -> ItemLoaded:
        out = []
        d = self.dashboard
        if d is not None and d.source == "live" and d.model is not None:
            out.append(
                {
                    "run_id": self.run_ids[0],
                    **item_detail_live(d.model, self.item_id, d.feed),
                    "spec": d.model.spec,
                    "task": d.model.task,
                    "run_options": d.model.run.get("options") or {},
                }
            )
        else:
            with self.llm_app.handle.use() as store:
                for rid in self.run_ids:
                    det = {"run_id": rid, **item_detail(store, rid, self.item_id)}
                    run = store.get_run(rid)
                    if (
                        run is not None
                    ):  # what the human-vs-model section needs (tui/panels/human.py)
                        det["spec"], det["task"] = (
                            store.suite_spec(run["suite_id"]),
                            run.get("task"),
                        )
                        det["run_options"] = run.get("options") or {}
                        if "clusters" in (det.get("fields") or {}):
                            det["probeval"] = store.load_analysis(rid, "probeval")
                    out.append(det)
        return ItemLoaded(out)

    def action_step(self, delta: int) -> None:
        if self.nav is None or self.nav.count == 0:
            self.notify("no list to step through", severity="warning")
            return
        self.nav.action_cursor(delta)
        row = self.nav.current_row()
        if row is not None:
            self.item_id = row["item_id"]
            self.load()

    def on_item_loaded(self, msg: ItemLoaded) -> None:
        head = Text()
        head.append(f"item {clean(self.item_id)}", style="bold")
        if self.nav is not None:
            head.append(f"   ({self.nav.cursor + 1}/{self.nav.count} in the list; n/p step)")
        self.query_one("#item-head", Static).update(head)
        self.details = msg.details  # what is shown (tests compare a live and a stored drill-down)
        self.query_one("#item-content", Static).update(render_item(msg.details))
        self._show_irt()
        self.query_one("#item-body").scroll_home(animate=False)


def render_item(details: list[dict[str, Any]]) -> Group:
    """The drill-down content for an item in one or more runs (all text literal)."""
    parts: list[Any] = []
    first = details[0] if details else {}
    parts.append(Text("text", style="bold underline"))
    parts.append(literal(first.get("text")))
    fields = first.get("fields") or {}
    human = {k: v for k, v in fields.items() if k.startswith("human")}
    if first.get("options"):
        parts.append(
            Text.assemble(("options  ", "bold"), literal(" | ".join(map(str, first["options"]))))
        )
    from llmscope.tui.panels.human import render_human_item

    side = render_human_item(
        first, details, first.get("spec"), first.get("task"), first.get("probeval")
    )
    parts.extend(side)
    if human and not side:
        parts.append(Text("human", style="bold underline"))
        for k, v in human.items():
            line = Text(f"{k:<12} ")
            if isinstance(v, (int, float)) and 0 <= float(v) <= 1:
                line.append(bar(float(v), 20) + f" {float(v):.2f}")
            else:
                line.append(literal(v))
            parts.append(line)
    if first.get("live") and not any(
        v.get("prompt") for d in details for v in d.get("variants", [])
    ):
        # The live channel carries full rows; only a row cut short (or not yet indexed) lacks them.
        parts.append(
            Text("live run: this item's full detail is not on the live channel yet", style="yellow")
        )
    if len(details) == 2:  # compare: the same item under both runs, side by side
        t = Table(box=None, expand=True, padding=(0, 1), show_header=False)
        for _ in details:
            t.add_column(ratio=1)
        t.add_row(*[Group(*_run_parts(d, True)) for d in details])
        parts.append(t)
    else:
        for d in details:
            parts.extend(_run_parts(d, len(details) > 1))
    return Group(*parts)


def _run_parts(d: dict[str, Any], head: bool) -> list[Any]:
    out: list[Any] = []
    if head:
        out.append(Text(f"\n══ run {d.get('run_id')} ══", style="bold magenta"))
    if not d.get("variants"):
        out.append(Text("no result for this item in this run", style="dim"))
    for v in d.get("variants", []):
        opts = d.get("run_options") or {}
        out.extend(
            _render_variant(
                v, [*answer_classes(v, d.get("task"), opts), *task_fields(v, d.get("task"), opts)]
            )
        )
    return out


def answer_classes(v: dict[str, Any], task: str | None, options: dict[str, Any]) -> list[Any]:
    """How a row scored with answer classes (task option ``equivalent``; WorldSense counts the
    responses 1 and 2 as one answer, KNOW, as its authors do) was counted: the model's raw
    response, the allowed response it became, and each side's class. A row counted correct
    whose prediction differs from its gold is explained here."""
    extra: dict[str, Any] = v["extra"] if isinstance(v.get("extra"), dict) else {}
    scored = extra.get("scored_as")
    if not isinstance(scored, dict):
        return []
    eq = _options(task, options).get("equivalent")
    out: list[Any] = [Text("scored by answer class", style="bold")]
    t = Table(box=None, padding=(0, 1), show_header=False)
    t.add_column(no_wrap=True, style="dim")
    t.add_column()
    raws = extra.get("raw_responses")
    if isinstance(raws, list) and raws:
        for k, r in enumerate(raws):
            t.add_row("raw response" if k == 0 else "asked again", literal(repr(r)))
    elif extra.get("mode") == "loglik":
        t.add_row(
            "raw response",
            Text(
                "none generated: the response is the allowed answer with the highest "
                "log-likelihood (loglik mode)",
                style="dim",
            ),
        )
    pred, gold = v.get("prediction"), v.get("gold")
    t.add_row(
        "response",
        Text.assemble(
            literal(pred if pred not in (None, "") else "(none: invalid, wrong)"),
            "  →  class ",
            (clean(scored.get("prediction")), "bold"),
        ),
    )
    t.add_row(
        "gold", Text.assemble(literal(gold), "  →  class ", (clean(scored.get("gold")), "bold"))
    )
    same = scored.get("prediction") == scored.get("gold") and pred not in (None, "")
    verdict = Text(
        "same class: counted correct" if same else "different classes: counted wrong",
        style="green" if same else "red",
    )
    if same and str(pred) != str(gold):
        verdict.append(
            "  (the prediction differs from the gold, but both are the same answer)", style="dim"
        )
    t.add_row("verdict", verdict)
    if isinstance(eq, dict) and eq:
        classes: dict[str, list[str]] = {}
        for resp, cls in eq.items():
            classes.setdefault(str(cls), []).append(str(resp))
        t.add_row(
            "mapping",
            literal(
                "; ".join(f"{', '.join(r)} → {c}" for c, r in classes.items())
                + "; any other response is its own class"
            ),
        )
    out.append(t)
    return out


def _options(task: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The run's task options over the task's declared defaults (engine/tasks option_specs)."""
    from llmscope.engine.tasks.registry import TASKS

    cls = TASKS.get(task) if isinstance(task, str) else None
    opts = {o.name: o.default for o in getattr(cls, "option_specs", ())}
    inner = options.get("task")  # as `llmscope run` records them
    inner = inner if isinstance(inner, dict) else {}
    opts.update({k: v for k, v in inner.items() if k in opts})
    return opts


def task_fields(v: dict[str, Any], task: str | None, options: dict[str, Any]) -> list[Any]:
    """The fields the run's task declares for its rows (`Task.item_fields`) beyond the ones
    drawn above, and, for a task that flags items, each probe's score, threshold and flag."""
    from llmscope.engine.tasks.registry import TASKS
    from llmscope.tui.data.fields import FLAG_KEY, field_value, show_field, task_item_fields

    # drawn by _render_variant (extra.methods as its own table)
    shown = {
        "prediction",
        "gold",
        "correct",
        "confidence",
        "error",
        "probs",
        "option_scores",
        "other",
        "extra.methods",
    }
    out: list[Any] = []
    rows = [
        (f.label, show_field(field_value(v, f.key), f.kind))
        for f in task_item_fields(task)
        if f.key not in shown and f.key != FLAG_KEY
    ]
    if rows:
        out.append(Text("task fields", style="bold"))
        t = Table(box=None, padding=(0, 1), show_header=False)
        t.add_column(no_wrap=True, style="dim")
        t.add_column()
        for label, val in rows:
            t.add_row(literal(label), literal(ellipsis(val, 500)))
        out.append(t)
    probes = getattr(TASKS.get(task) if isinstance(task, str) else None, "flag_probes", ())
    if probes:
        opts = _options(task, options)
        flagged = field_value(v, FLAG_KEY)
        head = Text("flags ", style="bold")
        head.append(
            "FLAGGED" if flagged else "not flagged", style="bold red" if flagged else "green"
        )
        out.append(head)
        t = Table(box=None, padding=(0, 1), header_style="bold")
        for c in ("probe", "score", "threshold", "flag"):
            t.add_column(c, justify="left" if c == "probe" else "right")
        for label, key, thr_opt, par_opt in probes:
            score = field_value(v, f"extra.{key}")
            thr = opts.get(thr_opt)
            par = field_value(v, f"extra.{par_opt}") or opts.get(par_opt)
            reasons = field_value(v, "extra.flag_reasons")  # the task's own decision, as stored
            hit = isinstance(reasons, list) and any(str(r).split()[:1] == [key] for r in reasons)
            t.add_row(
                literal(f"{label} ({par_opt} {par})" if par is not None else label),
                show_field(score, "number"),
                Text("none (never flags)", style="dim") if thr is None else f"≥ {thr}",
                Text("yes", style="bold red") if hit else Text("no", style="dim"),
            )
        out.append(t)
    return out


def _render_variant(v: dict[str, Any], declared: list[Any] | None = None) -> list[Any]:
    """One variant's row; ``declared`` (the task's fields and flags) follows its first line."""
    out: list[Any] = []
    corr = v.get("correct")
    mark = (
        ("✔", "green")
        if corr is not None and corr >= 0.5
        else (("✘", "red") if corr is not None else ("·", "dim"))
    )
    head = Text("\n")
    head.append(f"── variant {clean(v.get('variant'))} ", style="bold cyan")
    head.append(mark[0], style=mark[1])
    out.append(head)
    line = Text()
    line.append("gold ", style="bold")
    if v.get("gold") is None or v.get("gold") == "":
        line.append("none (no gold for this variant)", style="dim")
    else:
        line.append(literal(v.get("gold")))
    line.append("   prediction ", style="bold")
    line.append(literal(v.get("prediction")))
    line.append(
        f"   confidence {fmt(v.get('confidence'))}   tokens {fmt(v.get('n_tokens') or 0, metric='n_tokens')}"
    )
    out.append(line)
    if v.get("error"):
        out.append(Text.assemble(("error ", "bold red"), literal(v["error"])))
    out.extend(declared or [])
    if v.get("prompt"):
        out.append(Text("prompt (exactly as rendered for the model)", style="bold"))
        out.append(literal(v["prompt"], "italic"))
    probs = v.get("probs")
    if isinstance(probs, dict) and probs:
        out.append(Text("answer probabilities", style="bold"))
        rows = [(literal(k), p, fmt(p, metric="p")) for k, p in list(probs.items())[:20]]
        if v.get("other") is not None:
            rows.append((Text("(other)", style="dim"), v["other"], fmt(v["other"], metric="p")))
        out.append(_bar_table(rows))
    top = v.get("top_tokens")
    if isinstance(top, list) and top:
        out.append(Text("top next tokens", style="bold"))
        out.append(
            _bar_table(
                (literal(repr(tok.get("token"))), tok.get("prob"), fmt(tok.get("prob"), 4))
                for tok in top[:20]
                if isinstance(tok, dict)
            )
        )
    scores = v.get("option_scores")
    if isinstance(scores, dict) and scores:
        methods: list[str] = []
        for m in scores.values():
            if isinstance(m, dict):
                methods += [k for k in m if k not in methods]
        out.append(Text("option scores by method", style="bold"))
        cells = {
            opt: [fmt(m.get(k), metric=k) if isinstance(m, dict) else "-" for k in methods]
            for opt, m in scores.items()
        }
        t = Table(box=None, padding=(0, 1), header_style="bold")
        # numbers are never cut: the option text wraps on a narrow screen
        t.add_column("option", overflow="fold")
        for j, m in enumerate(methods):
            t.add_column(
                m,
                justify="right",
                no_wrap=True,
                min_width=max([len(m)] + [len(c[j]) for c in cells.values()]),
            )
        for opt, row in cells.items():
            t.add_row(literal(opt), *row)
        out.append(t)
    extra = v.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("context"), dict):
        # Minimal pairs: what each sentence was conditioned on (task option `context`).
        c = extra["context"]
        out.append(
            Text.assemble(
                ("sentence context ", "bold"),
                literal(f"{c.get('mode')} {c.get('text')!r}"),
                (f"  ({c.get('why')})", "dim"),
            )
        )
    if isinstance(extra, dict) and extra:
        if isinstance(extra.get("methods"), dict) and extra["methods"]:
            out.append(_methods_table(extra["methods"]))
        if "conditions" in extra and "predictions" in extra:  # syntaxgym: word-surprisal drill-down
            from llmscope.tui.panels.surprisal import render_surprisal

            out.extend(render_surprisal(extra))
            extra = {
                k: x
                for k, x in extra.items()
                if k not in ("conditions", "per_token", "predictions")
            }
        trace = {k: x for k, x in extra.items() if k != "methods"}
        if trace:
            out.append(Text("normalisation trace / task detail", style="bold"))
            for k, x in trace.items():
                s = x if isinstance(x, str) else short_json(x)
                out.append(Text.assemble((f"  {k}: ", "dim"), literal(ellipsis(s, 1000))))
    return out


def _bar_table(rows: Iterable[tuple[Text, Any, str]]) -> Table:
    """A label, a bar and the value shown, one row each (answer probabilities, next tokens)."""
    t = Table(box=None, padding=(0, 1), show_header=False)
    t.add_column(no_wrap=True)
    t.add_column()
    t.add_column(justify="right")
    for label, p, shown in rows:
        t.add_row(label, bar(p, 30), shown)
    return t


def _methods_table(methods: dict[str, Any]) -> Any:
    """Each scoring method's prediction, correctness and expected accuracy, one row a method."""
    t = plain_table(
        title="methods",
        title_style="bold",
    )
    t.add_column("method", no_wrap=True)
    t.add_column("prediction")
    t.add_column("correct", justify="right")
    t.add_column("expected acc", justify="right")
    for name, m in methods.items():
        if not isinstance(m, dict):
            t.add_row(literal(name), literal(short_json(m)), "", "")
            continue
        c = m.get("correct")
        t.add_row(
            literal(name),
            literal(m.get("prediction") if m.get("prediction") is not None else "-"),
            "-" if c is None else ("yes" if c >= 0.5 else "no"),
            fmt(m.get("expected_acc"), metric="expected_accuracy"),
        )
    return t


def short_json(x: Any) -> str:
    """JSON-like text of stored detail with its numbers in the one display format (no
    17-digit floats, counts as integers)."""
    if isinstance(x, dict):
        return (
            "{"
            + ", ".join(
                f"{json.dumps(str(k), ensure_ascii=False)}: {_short_value(str(k), v)}"
                for k, v in x.items()
            )
            + "}"
        )
    if isinstance(x, list):
        return "[" + ", ".join(_short_value(None, v) for v in x) + "]"
    return _short_value(None, x)


def _short_value(key: str | None, v: Any) -> str:
    if isinstance(v, (dict, list)):
        return short_json(v)
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return fmt(v, metric=key)
    return json.dumps(v, ensure_ascii=False, default=str)
