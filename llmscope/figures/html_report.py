"""`llmscope report --html`: one self-contained page per database, readable offline.

The page holds, per run, the method record (model, backend, task and scheme options, context,
plan), the metric rows `llmscope report --json` prints (the same rows, at the report's
precision), every figure that applies (inline SVG from :mod:`llmscope.figures.make`) and the first
failing items with their prompts, top tokens and human answers.

Nothing is fetched when it opens: CSS and SVG are inline, there is no script, and a
Content-Security-Policy (``default-src 'none'``) forbids any request a browser might make.
All text from items, models and servers is HTML-escaped (it is untrusted data).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CSP", "MAX_FAILING", "build_page", "write_page"]

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
MAX_FAILING = 50  # failing rows listed per run; the page states how many there are

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:980px;
padding:1em 1.5em;color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.25em;border-bottom:2px solid #0072B2;padding-bottom:.2em;
margin-top:2em}h3{font-size:1.05em;margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.4em 0;font-size:.92em}td,th{padding:.15em .6em;text-align:left;
vertical-align:top;border-bottom:1px solid #e4e4e4}th{background:#f4f6f8}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.dim{color:#666}.figs{display:flex;flex-wrap:wrap;gap:1.2em}figure{margin:0;max-width:470px}
figure svg{max-width:100%;height:auto}figcaption{font-size:.85em;color:#444}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.5em;margin:.3em 0;
font-size:.88em}details{border-bottom:1px solid #eee;padding:.2em 0}summary{cursor:pointer}
code{background:#f3f3f3;padding:0 .2em}
@media print{details{page-break-inside:avoid}}
"""


def _e(v: Any) -> str:
    """Untrusted text, escaped for HTML (quotes too: safe in attributes); bidi controls shown
    as `<U+202E>`, so an item cannot make a browser show 'gnp.exe' as 'exe.png'."""
    from llmscope.engine.textsafety import show_bidi

    return html.escape(show_bidi("" if v is None else str(v)), quote=True)


def _num(name: str, v: Any) -> str:
    from llmscope.analysis.metrics import display

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, (int, float)):
        return display(name, float(v))
    return _e(v)


def _group(g: Any) -> str:
    if not isinstance(g, dict):
        return str(g)
    return ", ".join(f"{k}={v}" for k, v in g.items()) or "overall"


def metrics_table(rows: list[dict[str, Any]]) -> str:
    """The report's metric rows as a table (value and interval at the report's precision)."""
    out = [
        '<table class="metrics"><thead><tr><th>metric</th><th>group</th><th>value</th><th>95% CI</th>'
        "<th>n</th><th>clusters</th><th>interval</th></tr></thead><tbody>"
    ]
    for r in rows:
        name = str(r.get("metric"))
        if name == "hypothesis" and isinstance(r.get("group"), dict):
            g = r["group"]
            grp = f"{g.get('id')}: {g.get('hypothesis')} → {g.get('verdict')}"
        else:
            grp = _group(r.get("group"))
        ci = r.get("ci95")
        cis = (
            f"[{_num(name, ci[0])}, {_num(name, ci[1])}]"
            if ci and ci[0] is not None and ci[1] is not None
            else ""
        )
        out.append(
            f'<tr data-metric="{_e(name)}"><td><code>{_e(name)}</code></td><td>{_e(grp)}</td>'
            f'<td class="num value">{_num(name, r.get("value"))}</td><td class="num ci">{cis}</td>'
            f'<td class="num n">{_e(r.get("n"))}</td>'
            f'<td class="num clusters">{_e("" if r.get("n_clusters") is None else r["n_clusters"])}</td>'
            f'<td class="dim">{_e(r.get("interval_method") or "")}</td></tr>'
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def method_record(run: dict[str, Any]) -> str:
    """Model, backend, task, scheme and context options, plan and provenance of one run."""
    opts = run.get("options") or {}
    meta = run.get("meta") or {}
    fields: list[tuple[str, Any]] = [
        ("run", run.get("run_id")),
        ("suite", run.get("suite_name")),
        ("task", run.get("task")),
        ("model", run.get("model")),
        ("backend", run.get("backend")),
        ("status", run.get("status")),
        ("items scored", f"{run.get('n_done')}/{run.get('n_total')}"),
        ("started", run.get("started_at")),
        ("finished", run.get("finished_at")),
    ]
    if isinstance(opts, dict):
        for k in sorted(opts):
            fields.append((f"options.{k}", opts[k]))
    if isinstance(meta, dict):
        for k in sorted(meta):
            fields.append((f"meta.{k}", meta[k]))
    out = ['<table class="method"><tbody>']
    for k, v in fields:
        if v is None or v == {} or v == []:
            continue
        text = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
        if len(text) > 600:
            text = text[:600] + f" … ({len(text)} characters)"
        out.append(f"<tr><th>{_e(k)}</th><td>{_e(text)}</td></tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def figures_html(store: Any, run: dict[str, Any]) -> str:
    """Every figure kind that applies to the run, as inline SVG."""
    from llmscope.figures.make import KINDS, FigureError, load_runs, make_figure, svg_text

    (data,) = load_runs(store, [run])
    parts = []
    for name, kind in KINDS.items():
        if kind.min_runs > 1 or not kind.applies(data):  # a page is one run
            continue
        try:
            fig = make_figure(name, [data])
        except FigureError as e:
            parts.append(f'<p class="dim">{_e(name)}: {_e(e)}</p>')
            continue
        parts.append(
            f'<figure id="fig-{_e(run["run_id"])}-{_e(name)}" data-kind="{_e(name)}">'
            f"{svg_text(fig)}<figcaption><b>{_e(name)}</b>: {_e(kind.title)}</figcaption></figure>"
        )
    if not parts:
        return '<p class="dim">no figure applies to this run</p>'
    return '<div class="figs">' + "\n".join(parts) + "</div>"


def _prob_table(title: str, pairs: list[tuple[Any, Any]]) -> str:
    cells = []
    for k, p in pairs:
        val = f"{float(p):.3f}" if isinstance(p, (int, float)) else _e(p)
        cells.append(f"<tr><td><code>{_e(k)}</code></td><td class='num'>{val}</td></tr>")
    if not cells:
        return ""
    return (
        f"<table class='probs'><tr><th>{_e(title)}</th><th>P</th></tr>"
        + "".join(cells)
        + "</table>"
    )


def _top_tokens(v: Any) -> str:
    """The first answer position's top next tokens (token, probability), at most ten."""
    first = v[0] if isinstance(v, list) and v and isinstance(v[0], list) else v
    pairs: list[tuple[Any, Any]] = []
    for t in (first if isinstance(first, list) else [])[:10]:
        if not isinstance(t, dict):
            continue
        p = t.get("prob")
        if p is None and isinstance(t.get("logprob"), (int, float)):
            p = math.exp(float(t["logprob"]))
        pairs.append((repr(t.get("token")), p))
    return _prob_table("top next token", pairs)


def _samples(extra: Any) -> str:
    samples = (extra or {}).get("samples") if isinstance(extra, dict) else None
    if not isinstance(samples, list) or not samples:
        return ""
    texts = [s.get("text") if isinstance(s, dict) else s for s in samples[:5]]
    more = f" (first 5 of {len(samples)})" if len(samples) > 5 else ""
    return f"<p>generated{more}:</p>" + "".join(f"<pre>{_e(t)}</pre>" for t in texts)


def _human_fields(fields: dict[str, Any], spec: dict[str, Any]) -> list[tuple[str, Any]]:
    keys = [k for k in fields if k.startswith("human")]
    hc = spec.get("human_counts_field")
    if isinstance(hc, str) and hc in fields and hc not in keys:
        keys.append(hc)
    return [(k, fields[k]) for k in keys]


def failing_html(store: Any, run: dict[str, Any], limit: int = MAX_FAILING) -> str:
    """The first failing rows (an error, or scored below 0.5) with prompt, the answer
    probabilities or generated samples, top tokens and human answers; the total is stated."""
    rid = str(run["run_id"])
    total = store.failing_count(rid)
    if not total:
        return '<p class="dim">no failing items (no error, none scored below 0.5)</p>'
    page = store.failing_page(rid, 0, limit)
    spec = store.suite_spec(run["suite_id"]) if run.get("suite_id") else {}
    shown = len(page["item_id"])
    out = [
        f'<p class="failing-count">{"first " + str(shown) + " of " if shown < total else ""}'
        f"{total} failing rows (an error, or scored below 0.5), in the order they were scored</p>"
    ]
    details = store.item_details(rid, [page["item_id"][i] for i in range(shown)])
    for i in range(shown):
        iid, variant = page["item_id"][i], page["variant"][i]
        det = details[str(iid)]
        row: dict[str, Any] = next((v for v in det.variants if v.get("variant") == variant), {})
        conf = page["confidence"][i]
        conf_s = "-" if conf is None else f"{float(conf):.3f}"
        out.append(
            f'<details class="item"><summary><code>{_e(iid)}</code> {_e(variant)} · gold '
            f"<b>{_e(page['gold'][i])}</b> · prediction <b>{_e(page['prediction'][i])}</b> · "
            f"confidence {conf_s}</summary>"
        )
        if page["error"][i]:
            out.append(f"<p>error: {_e(page['error'][i])}</p>")
        out.append(f"<pre>{_e(row.get('prompt') or det.text)}</pre>")
        probs = row.get("probs")
        if isinstance(probs, dict):
            out.append(_prob_table("answer", list(probs.items())))
        out.append(_samples(row.get("extra")))
        out.append(_top_tokens(row.get("top_tokens")))
        hum = _human_fields(det.fields or {}, spec)
        if hum:
            out.append(
                "<table class='human'>"
                + "".join(
                    f"<tr><th>{_e(k)}</th><td>{_e(json.dumps(v, default=str))}</td></tr>"
                    for k, v in hum
                )
                + "</table>"
            )
        out.append("</details>")
    return "\n".join(out)


def build_page(
    store: Any,
    runs: Sequence[dict[str, Any]],
    rows: list[dict[str, Any]],
    *,
    source: str = "",
    extra_rows: list[dict[str, Any]] | None = None,
    on_run: Callable[[dict[str, Any]], None] | None = None,
) -> str:
    """The whole page: ``rows`` are the metric rows `report --json` prints for ``runs``;
    ``on_run`` is told each run before its section is drawn (a progress bar)."""
    from llmscope import __version__
    from llmscope.analysis.metrics import BOOTSTRAP

    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_run.setdefault(str(r.get("run")), []).append(r)
    head = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>llmscope report{(' · ' + _e(source)) if source else ''}</title><style>{CSS}</style></head><body>"
    )
    body = [
        f"<h1>llmscope report</h1><p class='dim'>{len(runs)} run(s){' from ' + _e(source) if source else ''}; "
        f"llmscope {_e(__version__)}; {_e(BOOTSTRAP.describe())}; every number is a metric of the pipeline "
        f"(<code>llmscope report --json</code>; definitions: <code>llmscope report --explain</code>)</p>"
    ]
    if len(runs) > 1:
        body.append(
            "<ul class='toc'>"
            + "".join(
                f"<li><a href='#run-{_e(r['run_id'])}'>{_e(r.get('suite_name'))} · {_e(r.get('model'))} "
                f"({_e(r['run_id'])})</a></li>"
                for r in runs
            )
            + "</ul>"
        )
    for run in runs:
        if on_run is not None:
            on_run(run)
        rid = str(run["run_id"])
        body.append(
            f'<section class="run" id="run-{_e(rid)}"><h2>{_e(run.get("suite_name"))} · '
            f'{_e(run.get("model"))} <span class="dim">({_e(rid)})</span></h2>'
        )
        summary = (
            f"{_e(run.get('model'))} · backend {_e(run.get('backend'))} · task {_e(run.get('task'))} · "
            f"{_e(run.get('n_done'))}/{_e(run.get('n_total'))} items · {_e(run.get('status'))}"
        )
        body.append(
            f"<details class='method'><summary><b>Method</b>: {summary}</summary>"
            f"{method_record(run)}</details>"
        )
        body.append("<h3>Figures</h3>" + figures_html(store, run))
        body.append("<h3>Metrics</h3>" + metrics_table(by_run.get(rid, [])))
        body.append("<h3>Failing items</h3>" + failing_html(store, run))
        body.append("</section>")
    if extra_rows:
        body.append(
            "<section id='extra'><h2>Across runs</h2>" + metrics_table(extra_rows) + "</section>"
        )
    return head + "\n".join(body) + "</body></html>\n"


def write_page(
    store: Any,
    runs: Sequence[dict[str, Any]],
    rows: list[dict[str, Any]],
    path: str | Path,
    **kw: Any,
) -> Path:
    """Write :func:`build_page` to ``path`` (UTF-8)."""
    p = Path(path)
    p.write_text(build_page(store, runs, rows, **kw), encoding="utf-8")
    return p
