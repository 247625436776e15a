"""`rerun --where FILTER`: one boolean expression over a run's columns, and nothing else.

The filter is text from a command line (or a script, a shared notebook, a pasted recipe), so it
is parsed, never spliced into SQL as is: DuckDB's own parser (`json_serialize_sql`) turns
`SELECT item_id FROM r WHERE <filter>` into a syntax tree, which must be exactly one plain
SELECT whose condition uses only

- the run's columns (item_id, variant, correct, ...; every scalar item field),
- constants, comparisons, AND/OR/NOT, IS [NOT] NULL, IN (list), BETWEEN, CASE, CAST,
- LIKE/ILIKE/GLOB-style operators, arithmetic, and the scalar functions in `FUNCTIONS`.

Anything else (a second statement, COPY/ATTACH/SET, subqueries, table functions, `read_text`
and other file functions, qualified or unknown names) is refused with a one-line error naming
`--where` and what was refused. The checked tree is turned back into SQL with
`json_deserialize_sql`, so what runs is what was checked, on an in-memory connection that
cannot reach files (`enable_external_access = false`) as a second line of defence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

# Scalar functions and operators a filter may use: string matching, arithmetic, null
# handling, rounding. None reads or writes outside the row.
OPERATORS = frozenset(
    {
        "~~",
        "!~~",
        "~~*",
        "!~~*",
        "~~~",
        "!~~~",
        "^@",  # LIKE, NOT LIKE, ILIKE, NOT ILIKE, GLOB, starts with
        "+",
        "-",
        "*",
        "/",
        "//",
        "%",
        "||",
        "->>",
        "->",
    }
)
FUNCTIONS = frozenset(
    {
        "lower",
        "upper",
        "lcase",
        "ucase",
        "length",
        "len",
        "strlen",
        "trim",
        "ltrim",
        "rtrim",
        "contains",
        "starts_with",
        "ends_with",
        "prefix",
        "suffix",
        "strpos",
        "instr",
        "position",
        "substr",
        "substring",
        "left",
        "right",
        "replace",
        "concat",
        "regexp_matches",
        "regexp_full_match",
        "regexp_extract",
        "like_escape",
        "ilike_escape",
        "abs",
        "round",
        "floor",
        "ceil",
        "ceiling",
        "sign",
        "sqrt",
        "ln",
        "log",
        "log2",
        "log10",
        "exp",
        "least",
        "greatest",
        "isnan",
        "isinf",
        "isfinite",
        "coalesce",
        "ifnull",
        "nullif",
        "json_extract",
        "json_extract_string",
        "json_valid",
    }
)
EXPRESSION_CLASSES = frozenset(
    {
        "COLUMN_REF",
        "CONSTANT",
        "COMPARISON",
        "CONJUNCTION",
        "OPERATOR",
        "BETWEEN",
        "CAST",
        "CASE",
        "FUNCTION",
    }
)


class WhereError(ValueError):
    """A filter that is not one safe expression over the run's columns."""


def _refuse(where: str, what: str) -> WhereError:
    return WhereError(f"--where {where!r} refused: {what}")


def _serialize(con: Any, sql: str) -> dict[str, Any]:
    raw = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
    return dict(json.loads(raw))


def check_where(where: str, columns: Iterable[str], con: Any) -> str:
    """The filter as SQL that is safe to run against table `r` (WhereError when refused)."""
    if not where.strip():
        raise _refuse(where, "empty filter")
    tree = _serialize(con, f"SELECT item_id FROM r WHERE {where}")
    if tree.get("error"):
        msg = str(tree.get("error_message") or "not a filter")
        if "Only SELECT" in msg:
            msg = "only one condition is allowed (no statements such as COPY, ATTACH, SET, or ';')"
        raise _refuse(where, msg.splitlines()[0])
    stmts = tree.get("statements") or []
    if len(stmts) != 1:
        raise _refuse(where, "only one condition is allowed (no ';' and no second statement)")
    node = stmts[0].get("node") or {}
    if node.get("type") != "SELECT_NODE":
        raise _refuse(where, "only one condition is allowed (no UNION, INTERSECT or EXCEPT)")
    from_table = node.get("from_table") or {}
    extras = [k for k in ("group_expressions", "modifiers") if node.get(k)]
    extras += [k for k in ("having", "qualify", "sample") if node.get(k) is not None]
    if (
        (node.get("cte_map") or {}).get("map")
        or extras
        or from_table.get("type") != "BASE_TABLE"
        or from_table.get("table_name") != "r"
        or len(node.get("select_list") or []) != 1
    ):
        raise _refuse(
            where, "only one condition is allowed (no GROUP BY, ORDER BY, LIMIT or clauses)"
        )
    cond = node.get("where_clause")
    if not isinstance(cond, dict):
        raise _refuse(where, "not a condition")
    _walk(where, cond, list(columns))
    # Back to SQL from the checked tree: the text that runs is the tree that was checked.
    wrapper = _serialize(con, "SELECT DISTINCT item_id FROM r WHERE TRUE")
    wrapper["statements"][0]["node"]["where_clause"] = cond
    sql = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(wrapper)]).fetchone()[0]
    return str(sql)


def _walk(where: str, node: Any, columns: list[str]) -> None:
    """Every expression node anywhere in the tree must be of an allowed kind."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
            continue
        if not isinstance(n, dict):
            continue
        cls = n.get("class")
        if cls is not None:
            _check_node(where, n, str(cls), columns)
        stack.extend(v for v in n.values() if isinstance(v, dict | list))


def _check_node(where: str, n: dict[str, Any], cls: str, columns: list[str]) -> None:
    if cls not in EXPRESSION_CLASSES:
        what = {
            "SUBQUERY": "subqueries",
            "STAR": "*",
            "WINDOW": "window functions",
            "PARAMETER": "parameters",
            "LAMBDA": "lambdas",
            "TYPE": "type names (casts)",
        }.get(cls, f"{cls.lower().replace('_', ' ')} expressions")
        raise _refuse(where, f"{what} are not allowed in a filter")
    if cls == "COLUMN_REF":
        names = n.get("column_names") or []
        name = ".".join(map(str, names))
        if len(names) != 1 or str(names[0]).lower() not in {c.lower() for c in columns}:
            raise _refuse(where, f"unknown column {name!r} (columns: {', '.join(columns)})")
    elif cls == "FUNCTION":
        fname = str(n.get("function_name") or "")
        if n.get("schema") or n.get("catalog"):
            raise _refuse(where, f"qualified function names are not allowed ({fname})")
        ok = OPERATORS if n.get("is_operator") else FUNCTIONS
        if (
            fname.lower() not in ok
            or n.get("filter") is not None
            or n.get("distinct")
            or (n.get("order_bys") or {}).get("orders")
        ):
            kind = "operator" if n.get("is_operator") else "function"
            raise _refuse(
                where,
                f"{kind} {fname} is not allowed in a filter (allowed: comparisons, "
                "AND/OR/NOT, LIKE, IN, BETWEEN, IS NULL, arithmetic and scalar functions "
                "such as lower, length, abs, round, coalesce, regexp_matches)",
            )


def connect_sandboxed() -> Any:
    """An in-memory DuckDB connection that cannot read or write files or attach databases."""
    import duckdb

    return duckdb.connect(config={"enable_external_access": False, "lock_configuration": True})
