"""Toolkit I panels: method sensitivity, human-vs-model fit, order effects and plan hypotheses.

Opened from a run's dashboard with `m`. Every number is one of `llmscope report`'s
rows for the run (the same producers: analysis/methods.py, analysis/design_effects.py,
llmscope/plan.py), so the panel and the report cannot disagree.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Header, Static

from llmscope.tui.screens import BaseScreen

SENSITIVITY = ("scheme_disagreement_rate", "scheme_flip_rate", "scheme_acc_range")
ORDER = ("order_effect_accuracy", "order_effect_p_first_answer", "order_effect_expected_rating",
         "order_consistency", "order_robust_accuracy", "pred_equals_last_demo", "recency_effect", "majority_effect")


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else format(float(v), fmt)


def _ci(r: dict[str, Any]) -> str:
    ci = r.get("ci95")
    return "" if not ci or ci[0] is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _bar(p: float, width: int = 10) -> str:
    n = max(0, min(width, round(p * width)))
    return "█" * n + "·" * (width - n)


def render_methods(rows: list[dict[str, Any]], flips: list[dict[str, Any]], hvm: dict[str, Any] | None) -> Group:
    """The panel's content from report rows, flipping items and the human-vs-model table."""
    parts: list[Any] = []
    hyp = [r for r in rows if r["metric"] in ("hypothesis", "plan_deviation")]
    if hyp:
        t = Table(title="Pre-registered hypotheses", title_justify="left", expand=True)
        for c in ("id", "hypothesis", "verdict", "difference", "ci95", "p"):
            t.add_column(c)
        for r in hyp:
            g = r["group"]
            if r["metric"] == "plan_deviation":
                t.add_row("!", Text(str(g["deviation"])), Text("DEVIATION", style="bold red"), "", "", "")
            else:
                t.add_row(str(g["id"]), Text(str(g["hypothesis"])), str(g["verdict"]), _f(r["value"], "+.3f"),
                          _ci(r), _f(r.get("p_value"), ".4f"))
        parts += [t, Text("everything below is exploratory (not in the plan)", style="dim")]
    acc = {r["group"].get("method"): r for r in rows if r["metric"] == "accuracy" and set(r["group"]) == {"method"}}
    fits = {r["group"].get("scheme"): r for r in rows
            if r["metric"] == "fit_alpha" and set(r["group"]) <= {"scheme", "variant"}}
    llc = {r["group"].get("scheme"): r for r in rows
           if r["metric"] == "human_ll_per_choice" and set(r["group"]) <= {"scheme", "variant"}}
    if acc:
        t = Table(title="Scoring schemes side by side", title_justify="left", expand=True)
        for c in ("scheme", "accuracy", "ci95", "fitted α", "α ci95", "human LL/choice", "ci95"):
            t.add_column(c)
        for name, r in acc.items():
            fr, lr = fits.get(name), llc.get(name)
            t.add_row(str(name), _f(r["value"]), _ci(r), _f(fr["value"]) if fr else "-", _ci(fr) if fr else "",
                      _f(lr["value"]) if lr else "-", _ci(lr) if lr else "")
        parts.append(t)
    sens = [r for r in rows if r["metric"] in SENSITIVITY]
    if sens:
        parts.append(Text("  ".join(f"{r['metric']} {_f(r['value'])} {_ci(r)}" for r in sens)))
    base = [r for r in rows if r["metric"] in ("human_ll_uniform", "human_ll_empirical") and "variant" not in r["group"]]
    if base:
        parts.append(Text("human data log-likelihood baselines: " + ", ".join(
            f"{r['metric'][9:]} {_f(r['value'])} (n={r['n']})" for r in base)))
    if flips:
        t = Table(title=f"Items on which schemes disagree ({len(flips)})", title_justify="left", expand=True)
        t.add_column("item")
        t.add_column("gold")
        t.add_column("choices (✓ = correct)")
        for f in flips[:40]:
            ch = ", ".join(f"{s}:{(v['prediction'] or '-')[:18]}{'✓' if v['correct'] == 1.0 else ''}"
                           for s, v in f["schemes"].items())
            gold = "-" if f["gold"] is None else str(f["gold"])[:24]
            t.add_row(Text(f"{f['item_id']} {f['variant']}"), Text(gold), Text(ch))
        parts.append(t)
    if hvm:
        t = Table(title=f"Human vs model (scheme {hvm['scheme']}, α = {_f(hvm['alpha'])} {_ci({'ci95': hvm['ci95']})}; "
                  f"LL {_f(hvm['loglik'])} vs uniform {_f(hvm['ll_uniform'])}, empirical {_f(hvm['ll_empirical'])})",
                  title_justify="left", expand=True)
        for c in ("item", "option", "human", "", "model", ""):
            t.add_column(c)
        for it in hvm["items"][:30]:
            for j, o in enumerate(it["options"]):
                h, m = it["human"][j], it["model"][j]
                t.add_row(Text(it["item_id"] if j == 0 else ""), Text(str(o)[:36]), f"{h:.2f}", _bar(h),
                          f"{m:.2f}", _bar(m))
        parts.append(t)
        cond = hvm.get("conditions")
        if cond:
            t = Table(title="By condition (mean scores)", title_justify="left", expand=True)
            t.add_column("condition")
            for ty in cond["types"]:
                t.add_column(f"{ty} human / model")
            for r in cond["rows"]:
                t.add_row(str(r["condition"]), *[f"{h:.2f} / {m:.2f}" for h, m in zip(r["human"], r["model"], strict=True)])
            parts.append(t)
    order = [r for r in rows if r["metric"] in ORDER]
    if order:
        t = Table(title="Order effects and few-shot biases", title_justify="left", expand=True)
        for c in ("metric", "group", "value", "ci95", "n"):
            t.add_column(c)
        for r in order:
            t.add_row(r["metric"], Text(", ".join(f"{k}={v}" for k, v in r["group"].items())), _f(r["value"], "+.3f"),
                      _ci(r), str(r["n"]))
        parts.append(t)
    if not parts:
        parts.append(Text("no scoring schemes, human choice data, counterbalancing or plan in this run", style="dim"))
    return Group(*parts)


class MethodsData(Message):
    def __init__(self, content: Any) -> None:
        super().__init__()
        self.content = content


class MethodsScreen(BaseScreen):
    """Method sensitivity, human-vs-model fit, order effects and plan hypotheses of one run."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static("computing ...", id="methods-body")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="methods")
    def load(self) -> MethodsData:
        """Returns the panel; BaseScreen applies it on the UI thread (on_methods_data)."""
        from llmscope.analysis.methods import flipping_items, human_vs_model
        from llmscope.report import build_report, results_with_fields

        with self.llm_app.handle.use() as store:
            run = store.get_run(self.run_id) or store.find_run(self.run_id)
            if run is None:
                return MethodsData(Text(f"no run {self.run_id}", style="red"))
            rows = build_report(store, run)
            df = results_with_fields(store, run["run_id"])
            spec = store.suite_spec(run["suite_id"])
        flips = flipping_items(df) if not df.empty else []
        try:
            hvm = human_vs_model(df, spec) if not df.empty else None
        except ValueError:
            hvm = None
        return MethodsData(render_methods(rows, flips, hvm))

    def on_methods_data(self, msg: MethodsData) -> None:
        self.query_one("#methods-body", Static).update(msg.content)
