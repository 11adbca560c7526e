"""Your own memories as pictures: the graph around an entity, a timeline of episodes and facts,
decay states, cost per group and day, and a search box.

Every function reads a DuckDB connection with a view per table — ``lab.live_tables()`` (the
live database, through the running service's snapshot) or a workbench's own store — so the
same pictures work on the sample and on a user's data:

    con = lab.live_tables()
    graph = memories.entity_graph(con, "Alex Morgan")
    memories.draw_graph(graph)
    memories.draw_timeline(memories.timeline(con, "Alex Morgan"))
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

FACTS_SQL = """
    SELECT f.uuid, f.group_id, f.fact, f.relation, f.created_at, f.valid_at, f.invalid_at,
           f.expired_at, f.lifecycle_state, f.decay_score, f.source_uuid, f.target_uuid,
           s.name AS source, t.name AS target, ep.reference_time AS told_at
    FROM facts f
    JOIN entities s ON s.uuid = f.source_uuid
    JOIN entities t ON t.uuid = f.target_uuid
    LEFT JOIN episodes ep ON ep.uuid = f.episode_uuid
"""


def entities_named(con, name: str) -> list[str]:
    """The uuids of the entities called ``name`` (any group, any case)."""
    rows = con.execute("SELECT uuid FROM entities WHERE lower(name) = lower(?)", [name]).fetchall()
    if not rows:
        names = con.execute("SELECT name FROM entities ORDER BY name LIMIT 12").fetchall()
        known = [r[0] for r in names]
        raise ValueError(f"no entity named {name!r}; some that exist: {', '.join(known)}")
    return [r[0] for r in rows]


def entity_graph(con, name: str, depth: int = 1, current: bool = True):
    """The graph around the entity ``name``: its facts and, with ``depth`` 2, its neighbours'
    (``current``: only facts still true, neither invalidated nor expired). A networkx
    ``DiGraph``; an edge carries ``relation`` (several joined by " / ") and ``facts``."""
    import networkx as nx

    facts = con.sql(FACTS_SQL).df()
    if current:
        facts = facts[facts.invalid_at.isna() & facts.expired_at.isna()]
    reached = set(entities_named(con, name))
    chosen = facts.iloc[0:0]
    for _ in range(depth):
        hop = facts[facts.source_uuid.isin(reached) | facts.target_uuid.isin(reached)]
        chosen = hop
        reached |= set(hop.source_uuid) | set(hop.target_uuid)
    graph = nx.DiGraph(centre=name)
    for row in chosen.itertuples():
        if graph.has_edge(row.source, row.target):
            edge = graph.edges[row.source, row.target]
            edge["relation"] += f" / {row.relation}"
            edge["facts"].append(row.fact)
        else:
            graph.add_edge(row.source, row.target, relation=row.relation, facts=[row.fact])
    return graph


def draw_graph(graph, ax=None, seed: int = 7):
    """Draw :func:`entity_graph`'s graph, its centre highlighted; returns the axes."""
    import matplotlib.pyplot as plt
    import networkx as nx

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 8))
    centre = graph.graph.get("centre")
    colours = ["#ffb74d" if str(n).lower() == str(centre).lower() else "#c5cae9" for n in graph]
    pos = nx.spring_layout(graph, seed=seed, k=0.9)
    nx.draw_networkx(
        graph, pos, ax=ax, node_color=colours, node_size=900, font_size=8, arrowsize=12
    )
    labels = nx.get_edge_attributes(graph, "relation")
    nx.draw_networkx_edge_labels(graph, pos, edge_labels=labels, font_size=7, ax=ax)
    ax.set_title(f"Facts around {centre}")
    ax.axis("off")
    return ax


def timeline(con, name: str | None = None):
    """Episodes and facts in time (of the entity ``name``, or all): one row per event with
    ``kind`` (episode or fact), ``label``, ``start`` and ``end`` (a fact's validity: from
    ``valid_at``, else the time of the episode that told it, else when it was stored; to
    ``invalid_at``, NaT while still true)."""
    import pandas as pd

    facts = con.sql(FACTS_SQL).df()
    episodes = con.sql("SELECT uuid, name, body, reference_time FROM episodes").df()
    if name is not None:
        uuids = entities_named(con, name)
        facts = facts[facts.source_uuid.isin(uuids) | facts.target_uuid.isin(uuids)]
        mentions = con.execute(
            "SELECT episode_uuid FROM mentions WHERE list_contains(?, entity_uuid)", [uuids]
        ).fetchall()
        episodes = episodes[episodes.uuid.isin({m[0] for m in mentions})]
    fact_rows = pd.DataFrame(
        {
            "kind": "fact",
            "label": facts.fact,
            "start": facts.valid_at.fillna(facts.told_at).fillna(facts.created_at),
            "end": facts.invalid_at,
        }
    )
    episode_rows = pd.DataFrame(
        {
            "kind": "episode",
            "label": episodes.name,
            "start": episodes.reference_time,
            "end": pd.NaT,
        }
    )
    events = pd.concat([episode_rows, fact_rows], ignore_index=True)
    events["start"] = pd.to_datetime(events.start, utc=True)
    events["end"] = pd.to_datetime(events.end, utc=True)
    return events.sort_values(["kind", "start"], ignore_index=True)


def draw_timeline(events, ax=None, max_facts: int = 30, now: datetime | None = None):
    """Facts as bars over their validity (open bars reach ``now``), episodes as marks on the
    top row; the ``max_facts`` latest facts. Returns the axes."""
    import matplotlib.pyplot as plt

    facts = events[events.kind == "fact"].tail(max_facts)
    episodes = events[events.kind == "episode"]
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 0.3 * len(facts) + 2))
    end = now or datetime.now(UTC)
    for y, row in enumerate(facts.itertuples(), start=1):
        stop = end if _missing(row.end) else row.end
        colour = "#3f51b5" if _missing(row.end) else "#90a4ae"
        ax.plot([row.start, max(stop, row.start)], [y, y], linewidth=5, color=colour)
        ax.plot([row.start], [y], marker="o", markersize=5, color=colour)  # a short one shows
    ax.scatter(episodes.start, [0] * len(episodes), marker="|", s=300, color="#e65100")
    ax.set_yticks(range(len(facts) + 1))
    ax.set_yticklabels(["episodes", *(_short(label) for label in facts.label)], fontsize=7)
    ax.invert_yaxis()
    ax.set_title("Episodes and facts in time (grey: no longer true; a dot: since then)")
    return ax


def decay_states(con):
    """Memories per lifecycle state, entities and facts side by side."""
    frame = con.sql(
        "SELECT 'entities' AS kind, lifecycle_state FROM entities "
        "UNION ALL SELECT 'facts', lifecycle_state FROM facts"
    ).df()
    return frame.groupby(["lifecycle_state", "kind"]).size().unstack(fill_value=0)


def draw_decay(con, axes=None):
    """Lifecycle states (bars) and the decay scores of facts (histogram)."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 4))
    decay_states(con).plot.bar(ax=axes[0], rot=0, title="memories per lifecycle state")
    scores = con.sql("SELECT decay_score FROM facts").df().decay_score
    scores.plot.hist(bins=20, range=(0, 1), ax=axes[1], title="decay score of facts")
    return axes


def cost_per_group_day(con):
    """USD of LLM calls per day (rows) and group (columns); calls without an episode (the
    start-up probe, classification) are the group ``(none)``."""
    frame = con.sql(
        "SELECT coalesce(e.group_id, '(none)') AS group_id, "
        "CAST(date_trunc('day', c.ts) AS DATE) AS day, sum(c.total_cost) AS usd "
        "FROM llm_calls c LEFT JOIN episodes e ON e.uuid = c.episode_uuid GROUP BY 1, 2"
    ).df()
    table = frame.pivot_table(index="day", columns="group_id", values="usd", fill_value=0.0)
    table.index = [str(day)[:10] for day in table.index]  # 2026-01-05, not a timestamp
    table.index.name = "day"
    return table


def draw_cost(table, ax=None):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4))
    table.plot.bar(stacked=True, ax=ax, rot=0, title="LLM cost per day and group (USD)")
    ax.set_xlabel("")
    return ax


class SearchBox:
    """A text box; pressing Enter shows ``search(query)``'s results as a table below it.
    ``run(query)`` does the same from code (and returns the table); ``results(query)`` only
    returns the table, to show where no widget is drawn (a page rendered from the notebook
    keeps plain outputs, not a widget's)."""

    def __init__(self, search: Callable[[str], list[dict[str, Any]]], columns=None):
        import ipywidgets as widgets

        self.search = search
        self.columns = columns
        self.text = widgets.Text(placeholder="what do you want to recall?", continuous_update=False)
        self.output = widgets.Output()
        self.widget = widgets.VBox([self.text, self.output])
        self.text.observe(lambda change: self.run(change["new"]), names="value")

    def results(self, query: str):
        """The table of ``search(query)``'s results (its ``columns`` when given)."""
        import pandas as pd

        table = pd.DataFrame(self.search(query) if query.strip() else [])
        if self.columns is not None and not table.empty:
            table = table[[c for c in self.columns if c in table]]
        return table

    def run(self, query: str):
        from IPython.display import display

        table = self.results(query)
        self.output.clear_output()
        with self.output:
            display(table)
        return table

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)


def _missing(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
