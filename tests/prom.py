"""Reading the Prometheus text exposition in tests (``prometheus_client``'s own parser)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def parse(exposition: bytes | str) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, frozenset(labels.items())): value}`` of every sample."""
    text = exposition.decode() if isinstance(exposition, bytes) else exposition
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def family_types(exposition: bytes | str) -> dict[str, str]:
    """``{family name: type}``, without the ``*_created`` twins prometheus_client adds."""
    text = exposition.decode() if isinstance(exposition, bytes) else exposition
    return {
        f.name: f.type
        for f in text_string_to_metric_families(text)
        if not f.name.endswith("_created")
    }


def sample_names(exposition: bytes | str) -> set[str]:
    return {name for name, _ in parse(exposition) if not name.endswith("_created")}


def value(exposition: bytes | str, name: str, **labels: str) -> float | None:
    return parse(exposition).get((name, frozenset(labels.items())))


def label_sets(exposition: bytes | str, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels) in parse(exposition) if n == name]


def buckets(exposition: bytes | str, name: str, **labels: str) -> list[tuple[float, float]]:
    """``[(le, cumulative count), ...]`` of histogram ``name`` sorted by ``le`` (+Inf last)."""
    rows = []
    for (n, lab), val in parse(exposition).items():
        found = dict(lab)
        le = found.pop("le", None)
        if n == f"{name}_bucket" and found == labels and le is not None:
            rows.append((float(le), val))
    return sorted(rows)


def matching(exposition: bytes | str, name: str, **labels: str) -> float | None:
    """The first sample ``name`` whose labels include ``labels`` (others may differ)."""
    for (n, lab), val in parse(exposition).items():
        if n == name and set(labels.items()) <= lab:
            return val
    return None
