"""Method panels: method sensitivity, human-vs-model fit, order effects and plan hypotheses.

Opened from a run's dashboard with `m`. Every number is one of `llmscope report`'s
rows for the run (the same producers: analysis/methods.py, analysis/design_effects.py,
llmscope/runs/plan.py), so the panel and the report cannot disagree.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Header, Static

from llmscope.analysis.rows import format_p
from llmscope.tui.screens.base import BackScreen
from llmscope.tui.widgets import literal

SENSITIVITY = ("scheme_disagreement_rate", "scheme_flip_rate", "scheme_acc_range")
ORDER = (
    "order_effect_accuracy",
    "order_effect_p_first_answer",
    "order_effect_expected_rating",
    "order_consistency",
    "order_robust_accuracy",
    "pred_equals_last_demo",
    "recency_effect",
    "majority_effect",
)


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else format(float(v), fmt)


def _ci(r: dict[str, Any]) -> str:
    ci = r.get("ci95")
    return "" if not ci or ci[0] is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _cut(s: str, n: int) -> str:
    """``s`` in at most ``n`` characters, an ellipsis marking a cut (never cut silently)."""
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


def _bar(p: float, width: int = 10) -> str:
    n = max(0, min(width, round(p * width)))
    return "█" * n + "·" * (width - n)


def _table(title: str, *columns: str) -> Table:
    """A full-width table with its title on the left and these column headers."""
    t = Table(title=title, title_justify="left", expand=True)
    for c in columns:
        t.add_column(c)
    return t


def render_methods(
    rows: list[dict[str, Any]], flips: list[dict[str, Any]], hvm: dict[str, Any] | None
) -> Group:
    """The panel's content from report rows, flipping items and the human-vs-model table."""
    parts: list[Any] = []
    hyp = [r for r in rows if r["metric"] in ("hypothesis", "plan_deviation")]
    if hyp:
        t = _table(
            "Pre-registered hypotheses", "id", "hypothesis", "verdict", "difference", "ci95", "p"
        )
        for r in hyp:
            g = r["group"]
            if r["metric"] == "plan_deviation":
                t.add_row(
                    "!", Text(str(g["deviation"])), Text("DEVIATION", style="bold red"), "", "", ""
                )
            else:
                t.add_row(
                    str(g["id"]),
                    Text(str(g["hypothesis"])),
                    str(g["verdict"]),
                    _f(r["value"], "+.3f"),
                    _ci(r),
                    format_p(r.get("p_value")),
                )
        parts += [t, Text("everything below is exploratory (not in the plan)", style="dim")]
    acc = {
        r["group"].get("method"): r
        for r in rows
        if r["metric"] == "accuracy" and set(r["group"]) == {"method"}
    }
    if acc:
        t = _table("Scoring schemes side by side", "scheme", "accuracy", "ci95")
        for name, r in acc.items():
            t.add_row(str(name), _f(r["value"]), _ci(r))
        parts.append(t)
    fits = _fit_table(rows)
    if fits is not None:
        parts.append(fits)
    sens = [r for r in rows if r["metric"] in SENSITIVITY]
    if sens:
        parts.append(Text("  ".join(f"{r['metric']} {_f(r['value'])} {_ci(r)}" for r in sens)))
    base = [
        r
        for r in rows
        if r["metric"] in ("human_ll_uniform", "human_ll_empirical") and "variant" not in r["group"]
    ]
    if base:
        parts.append(
            Text(
                "human data log-likelihood baselines: "
                + ", ".join(f"{r['metric'][9:]} {_f(r['value'])} (n={r['n']})" for r in base)
            )
        )
    if flips:
        t = _table(
            f"Items on which schemes disagree ({len(flips)})",
            "item",
            "gold",
            "choices (✓ = correct)",
        )
        for f in flips[:40]:
            ch = ", ".join(
                f"{s}:{_cut(v['prediction'] or '-', 18)}{'✓' if v['correct'] == 1.0 else ''}"
                for s, v in f["schemes"].items()
            )
            gold = "-" if f["gold"] is None else _cut(str(f["gold"]), 24)
            t.add_row(Text(f"{f['item_id']} {f['variant']}"), Text(gold), Text(ch))
        parts.append(t)
    if hvm:
        parts += _human_vs_model(rows, hvm)
    order = [r for r in rows if r["metric"] in ORDER]
    if order:
        t = _table("Order effects and few-shot biases", "metric", "group", "value", "ci95", "n")
        for r in order:
            t.add_row(
                r["metric"],
                Text(", ".join(f"{k}={v}" for k, v in r["group"].items())),
                _f(r["value"], "+.3f"),
                _ci(r),
                str(r["n"]),
            )
        parts.append(t)
    if not parts:
        parts.append(
            Text(
                "no scoring schemes, human choice data, counterbalancing or plan in this run",
                style="dim",
            )
        )
    return Group(*parts)


# The fit's rows as `llmscope report` names them (analysis/methods.py fit_rows), per template.
FIT_METRICS = ("fit_alpha", "human_loglik", "human_ll_per_choice", "softmax_accuracy_fitted")


def _is_fit(r: dict[str, Any]) -> bool:
    g = r["group"]
    return (
        r["metric"] in FIT_METRICS
        and "scheme" in g
        and set(g) <= {"scheme", "variant", "alpha_at_bound"}
    )


def _find(
    rows: list[dict[str, Any]], metric: str, variant: str, scheme: str | None = None
) -> dict[str, Any] | None:
    """The report row ``metric`` of one template ("" for a run with one) and scheme."""
    for r in rows:
        g = r["group"]
        if (
            r["metric"] == metric
            and str(g.get("variant", "")) == variant
            and g.get("scheme") == scheme
            and set(g) <= {"scheme", "variant", "alpha_at_bound"}
        ):
            return r
    return None


def fit_alphas(rows: list[dict[str, Any]], scheme: str = "raw") -> dict[str, float]:
    """Template ("" for a run with one) -> the α the pipeline fitted for ``scheme``."""
    return {
        str(r["group"].get("variant", "")): float(r["value"])
        for r in rows
        if r["metric"] == "fit_alpha"
        and _is_fit(r)
        and r["group"].get("scheme") == scheme
        and r["value"] is not None
    }


def _fit_table(rows: list[dict[str, Any]]) -> Table | None:
    """The softmax choice model fitted to the human choices, per scheme and template: the
    report's rows under the report's names, one per line (fit_alpha is the fitted parameter;
    the log-likelihood per choice and the softmax accuracy are at the fitted α)."""
    keys = list(
        dict.fromkeys(
            (str(r["group"].get("variant", "")), str(r["group"]["scheme"]))
            for r in rows
            if _is_fit(r)
        )
    )
    if not keys:
        return None
    per_variant = any(v for v, _ in keys)
    t = Table(
        title="Fitted to the human choices: softmax(α · score) per scheme"
        + (" and template" if per_variant else ""),
        title_justify="left",
        header_style="bold",
    )
    for c in ("scheme, variant" if per_variant else "scheme", "metric", "value", "ci95", "n"):
        t.add_column(c, no_wrap=True, justify="right" if c in ("value", "n") else "left")
    for v, sch in keys:
        for m in ("fit_alpha", "human_ll_per_choice", "softmax_accuracy_fitted"):
            r = _find(rows, m, v, sch)
            if r is None:
                continue
            label = m + (
                " (fitted" + (", at the search bound)" if r["group"].get("alpha_at_bound") else ")")
                if m == "fit_alpha"
                else ""
            )
            t.add_row(
                f"{sch}, {v}" if per_variant else sch,
                label,
                _f(r["value"]),
                _ci(r),
                str(r.get("n", "-")),
            )
    return t


def _human_vs_model(rows: list[dict[str, Any]], hvm: dict[str, Any]) -> list[Any]:
    """Per template: the pipeline's fit in the title, each item's human choice shares beside the
    model's probabilities (normalised over the options) and the fitted choice model."""
    parts: list[Any] = []
    sch = hvm["scheme"]
    for v in hvm["variants"]:
        var = v["variant"]
        fa, ll = _find(rows, "fit_alpha", var, sch), _find(rows, "human_loglik", var, sch)
        uni, emp = _find(rows, "human_ll_uniform", var), _find(rows, "human_ll_empirical", var)
        title = Text(
            f"Human vs model{f', variant {var}' if var else ''} (scheme {sch}): ", style="bold"
        )
        title.append(
            f"fit_alpha {_f(fa['value']) if fa else '-'} {_ci(fa) if fa else ''} (fitted); "
            f"human_loglik {_f(ll['value']) if ll else '-'} at the fitted α; "
            f"human_ll_uniform {_f(uni['value']) if uni else '-'}, "
            f"human_ll_empirical {_f(emp['value']) if emp else '-'}"
        )
        parts.append(title)  # a line of its own: a table's title wraps at the table's width
        t = Table(
            caption="model P: the model's probabilities normalised over the options (softmax of the "
            "scores); fitted: softmax(α · score) at the fitted α",
            caption_justify="left",
        )
        t.add_column("item", no_wrap=True)  # an id is never cut
        t.add_column("option", max_width=36, overflow="ellipsis", no_wrap=True)
        for c in ("human", "", "model P", "", "fitted"):
            t.add_column(c, no_wrap=True)
        for it in v["items"][:30]:
            for j, o in enumerate(it["options"]):
                h, m, f = it["human"][j], it["model_p"][j], it["fitted"][j]
                t.add_row(
                    Text(it["item_id"] if j == 0 else ""),
                    literal(str(o)),
                    f"{h:.2f}",
                    _bar(h),
                    f"{m:.2f}",
                    _bar(m),
                    f"{f:.2f}",
                )
        if len(v["items"]) > 30:
            t.add_row(
                Text(f"… {len(v['items']) - 30} more items", style="dim"), "", "", "", "", "", ""
            )
        parts.append(t)
        cond = v.get("conditions")
        if cond:
            t = _table(
                f"By condition{f', variant {var}' if var else ''} (fitted, mean scores)",
                "condition",
                *(f"{ty} human / fitted" for ty in cond["types"]),
            )
            for r in cond["rows"]:
                t.add_row(
                    str(r["condition"]),
                    *[f"{h:.2f} / {m:.2f}" for h, m in zip(r["human"], r["model"], strict=True)],
                )
            parts.append(t)
    return parts


class MethodsData(Message):
    def __init__(self, content: Any) -> None:
        super().__init__()
        self.content = content


class MethodsScreen(BackScreen):
    """Method sensitivity, human-vs-model fit, order effects and plan hypotheses of one run."""

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
            # at the α the pipeline fitted per template (the report's fit_alpha rows)
            hvm = human_vs_model(df, spec, alphas=fit_alphas(rows)) if not df.empty else None
        except ValueError:
            hvm = None
        return MethodsData(render_methods(rows, flips, hvm))

    def on_methods_data(self, msg: MethodsData) -> None:
        self.query_one("#methods-body", Static).update(msg.content)
