"""Time words in a search query: the window a question names, and whether it asks for the
present. Pure functions of the query text and ``now``; no LLM.

:func:`read_window` finds one time expression and turns it into a half-open window
``[start, end)`` of UTC times relative to ``now``:

* calendar periods named relative to now — "yesterday", "last week", "this month", "last
  year" (and "ontem", "semana passada", "el mes pasado", "letzte Woche", "l'année dernière",
  "先週", "上个月", "去年"…): that day, Monday-to-Monday week, month or year;
* "N days/weeks/months/years ago" ("há dois dias", "hace tres semanas", "vor zwei Tagen",
  "il y a deux jours", "2日前", "两天前"): the day (give or take one), week, month or year it
  points into; "in the past N days" ("nos últimos 3 dias", "过去两周"): from then to now;
* a month, a year, a month of a year ("in March 2023", "em março de 2023", "2023年3月"): a
  month without a year is its latest occurrence not after now;
* a holiday ("Christmas", "Natal", "Navidad", "Weihnachten", "Noël", "クリスマス", "圣诞节";
  New Year, Valentine's day, Halloween): its day, the latest not after now;
* a weekday ("last Saturday", "no sábado passado", "先週の土曜日" read as its week): the latest
  such day before today;
* any of those after "before" / "after" / "since" (in each language; Japanese and Chinese put
  them after: "クリスマスの前", "圣诞节之前"): the :data:`BEFORE_SPAN` before it, or from it
  to now;
* what is left, a date written out ("May 3rd", "3 de maio", "5月3日", "2023-05-03"), is read
  by ``dateparser`` (its day, week, month or year), called only when such a date-like token
  is present (it costs milliseconds; the rest costs microseconds).

:func:`asks_present` says whether the question asks about now ("current", "still", "latest",
"agora", "todavía", "aktuell", "actuellement", "現在", "目前"…): the searcher then ranks the
newer of similar memories first.

Languages: English, Portuguese, Spanish, German, French, Japanese, Chinese. Results are
cached per (query, day of ``now``).
"""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["BEFORE_SPAN", "TimeWindow", "asks_present", "read_window", "warm_up"]

BEFORE_SPAN = timedelta(days=30)  # "before X": the month before X (a boost, not a filter)
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class TimeWindow:
    """The half-open window ``[start, end)`` a query named, and the words that named it."""

    start: datetime
    end: datetime
    text: str


# --- vocabulary ----------------------------------------------------------------------------
_NUMBERS = {
    **dict.fromkeys(
        [
            "a",
            "an",
            "one",
            "um",
            "uma",
            "un",
            "una",
            "uno",
            "ein",
            "eine",
            "einem",
            "einer",
            "einen",
            "une",
            "一",
        ],
        1,
    ),  # fmt: skip
    **dict.fromkeys(["two", "couple", "dois", "duas", "dos", "zwei", "deux", "二", "两", "兩"], 2),
    **dict.fromkeys(["three", "few", "três", "tres", "drei", "trois", "三"], 3),
    **dict.fromkeys(["four", "quatro", "cuatro", "vier", "quatre", "四"], 4),
    **dict.fromkeys(["five", "cinco", "fünf", "cinq", "五"], 5),
    **dict.fromkeys(["six", "seis", "sechs", "六"], 6),
    **dict.fromkeys(["seven", "sete", "siete", "sieben", "sept", "七"], 7),
    **dict.fromkeys(["eight", "oito", "ocho", "acht", "huit", "八"], 8),
    **dict.fromkeys(["nine", "nove", "nueve", "neun", "neuf", "九"], 9),
    **dict.fromkeys(["ten", "dez", "diez", "zehn", "dix", "十"], 10),
}
_UNITS = {
    "day": r"days?|dias?|días?|tag(?:e|en)?|jours?|日|天",
    "week": r"weeks?|fortnight|semanas?|wochen?|semaines?|週間|週|周|星期|个星期|個星期|礼拜|禮拜",
    "month": r"months?|m[eê]s(?:es)?|monat(?:e|en)?|mois|か月|ヶ月|カ月|ヵ月|个月|個月",
    "year": r"years?|anos?|años?|jahr(?:e|en)?|ans?|années?|年",
}
_NUM = r"(\d{1,3}|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True)) + ")"
_UNIT = "(" + "|".join(_UNITS.values()) + ")"
_AGO = [  # (pattern, the group of the number, the group of the unit)
    re.compile(rf"\b(?:a\s+)?{_NUM}\s+(?:of\s+)?{_UNIT}\s+ago\b", re.I),
    re.compile(rf"\b(?:há|faz|hace|vor|il y a)\s+(?:uns\s+|unas\s+)?{_NUM}\s+{_UNIT}(?!\w)", re.I),
    re.compile(rf"{_NUM}\s*{_UNIT}\s*(?:前|以前)", re.I),
]
_PAST_N = [
    re.compile(
        rf"\b(?:in\s+the\s+|over\s+the\s+|during\s+the\s+)?(?:past|last)\s+{_NUM}\s+{_UNIT}\b"
        rf"|\b(?:n?os|n?as|en\s+los|en\s+las|in\s+den|les|ces)\s+(?:últimos|últimas|letzten"
        rf"|derniers|dernières)\s+{_NUM}\s+{_UNIT}(?!\w)",
        re.I,
    ),
    re.compile(rf"(?:过去|過去|最近|这|這)\s*{_NUM}\s*{_UNIT}", re.I),
]
# (words, which period, how many periods back: 0 this one, 1 the one before)
_NAMED: list[tuple[str, str, int]] = [
    (r"\byesterday\b|\bontem\b|\bayer\b|\bgestern\b|\bhier\b|昨日|昨天", "day", 1),
    (r"\btoday\b|\bhoje\b|\bhoy\b|\bheute\b|\baujourd'hui\b|今日|今天", "day", 0),
    (
        r"\b(?:last|past|previous)\s+week\b|\bsemana\s+passada\b|\bsemana\s+pasada\b"
        r"|\b(?:letzte|vergangene|vorige)n?\s+woche\b|\bsemaine\s+(?:dernière|passée)\b"
        r"|先週|上周|上個?个?星期|上礼拜|上禮拜",
        "week",
        1,
    ),  # fmt: skip
    (
        r"\bthis\s+week\b|\besta\s+semana\b|\bdiese\s+woche\b|\bcette\s+semaine\b"
        r"|今週|这周|這週|本周|这个星期",
        "week",
        0,
    ),  # fmt: skip
    (
        r"\b(?:last|past|previous)\s+month\b|\bm[eê]s\s+passado\b|\bmes\s+pasado\b"
        r"|\b(?:letzte|vergangene|vorige)n?\s+monat\b|\bmois\s+(?:dernier|passé)\b"
        r"|先月|上个月|上個月",
        "month",
        1,
    ),  # fmt: skip
    (
        r"\bthis\s+month\b|\beste\s+m[eê]s\b|\bdiese[nm]?\s+monat\b|\bce\s+mois\b"
        r"|今月|这个月|這個月|本月",
        "month",
        0,
    ),  # fmt: skip
    (
        r"\b(?:last|past|previous)\s+year\b|\bano\s+passado\b|\baño\s+pasado\b"
        r"|\b(?:letzte|vergangene|vorige)[sn]?\s+jahr\b|\bl'année\s+(?:dernière|passée)\b"
        r"|\ban\s+dernier\b|去年|昨年",
        "year",
        1,
    ),  # fmt: skip
    (
        r"\bthis\s+year\b|\beste\s+ano\b|\beste\s+año\b|\bdiese[sm]\s+jahr\b|\bcette\s+année\b"
        r"|今年",
        "year",
        0,
    ),  # fmt: skip
]
_NAMED_RE = [(re.compile(p, re.I), unit, back) for p, unit, back in _NAMED]
_MONTHS = [
    # en, pt, es, de, fr
    ("january", "janeiro", "enero", "januar", "janvier"),
    ("february", "fevereiro", "febrero", "februar", "février"),
    ("march", "março", "marzo", "märz", "mars"),
    ("april", "abril", "abril", "april", "avril"),
    ("may", "maio", "mayo", "mai", "mai"),
    ("june", "junho", "junio", "juni", "juin"),
    ("july", "julho", "julio", "juli", "juillet"),
    ("august", "agosto", "agosto", "august", "août"),
    ("september", "setembro", "septiembre", "september", "septembre"),
    ("october", "outubro", "octubre", "oktober", "octobre"),
    ("november", "novembro", "noviembre", "november", "novembre"),
    ("december", "dezembro", "diciembre", "dezember", "décembre"),
]
_MONTH_OF = {name: i + 1 for i, names in enumerate(_MONTHS) for name in names}
_ENGLISH_AMBIGUOUS = {"may", "march"}  # English verbs too: a month only when capitalised
_MONTH_NAMES = "|".join(sorted(_MONTH_OF, key=len, reverse=True))
_MONTH_RE = re.compile(
    rf"\b({_MONTH_NAMES})\b(?:\s+(?:de\s+|of\s+)?(\d{{4}}))?(?!\s*\d{{1,2}}\b)", re.I
)
_CJK_DIGITS = {c: i for i, c in enumerate("〇一二三四五六七八九")}
_CJK_MONTH_RE = re.compile(
    r"(?:(\d{4})\s*年\s*)?(\d{1,2}|十[一二]?|[一二三四五六七八九])\s*月(?!\s*\d|[一二三四五六七八九十]+[日号號])"
)
_YEAR_RE = re.compile(
    r"\b(?:in|em|en|im|during|durante|since|desde|seit|depuis|before|after|antes\s+de"
    r"|depois\s+de|después\s+de|vor|nach|avant|après)\s+((?:19|20)\d\d)\b|((?:19|20)\d\d)\s*年(?!\s*\d)",
    re.I,
)
_HOLIDAYS: list[tuple[str, Any]] = [
    (
        r"\bchristmas\b|\bxmas\b|\bnatal\b|\bnavidad\b|\bweihnachten\b|\bno[eë]l\b|クリスマス"
        r"|圣诞节?|聖誕節?",
        (12, 25),
    ),  # fmt: skip
    (
        r"\bnew\s+year'?s?(?:\s+day|\s+eve)?\b|\bano\s+novo\b|\baño\s+nuevo\b|\bneujahr\b"
        r"|\bnouvel\s+an\b|お?正月|元旦|新年",
        (1, 1),
    ),  # fmt: skip
    (
        r"\bvalentine'?s?(?:\s+day)?\b|\bdia\s+dos\s+namorados\b|\bsan\s+valent[ií]n\b"
        r"|\bvalentinstag\b|\bsaint[- ]valentin\b|バレンタイン|情人节|情人節",
        (2, 14),
    ),  # fmt: skip
    (r"\bhalloween\b|ハロウィン|万圣节|萬聖節", (10, 31)),
    (
        r"\bthanksgiving\b|\bação\s+de\s+graças\b|\bacción\s+de\s+gracias\b|感恩节|感謝祭",
        "thanksgiving",
    ),  # fmt: skip
]
_HOLIDAY_RE = [(re.compile(p, re.I), when) for p, when in _HOLIDAYS]
_WEEKDAYS = [
    ("monday", "segunda", "lunes", "montag", "lundi", "月曜", "星期一", "周一", "礼拜一"),
    ("tuesday", "terça", "martes", "dienstag", "mardi", "火曜", "星期二", "周二", "礼拜二"),
    (
        "wednesday",
        "quarta",
        "miércoles",
        "mittwoch",
        "mercredi",
        "水曜",
        "星期三",
        "周三",
        "礼拜三",
    ),
    ("thursday", "quinta", "jueves", "donnerstag", "jeudi", "木曜", "星期四", "周四", "礼拜四"),
    ("friday", "sexta", "viernes", "freitag", "vendredi", "金曜", "星期五", "周五", "礼拜五"),
    ("saturday", "sábado", "sábado", "samstag", "samedi", "土曜", "星期六", "周六", "礼拜六"),
    ("sunday", "domingo", "domingo", "sonntag", "dimanche", "日曜", "星期日", "星期天", "周日"),
]
_WEEKDAY_OF = {name: i for i, names in enumerate(_WEEKDAYS) for name in names}
_WEEKDAY_RE = re.compile(
    r"(?:\b(?:last|this past|on|no|na|el|am|letzten)\s+)?("
    + "|".join(sorted(map(re.escape, _WEEKDAY_OF), key=len, reverse=True))
    + r")(?:-feira)?(?:\s+(?:passad[oa]|pasado|dernier))?",
    re.I,
)
# "before" / "after" around an anchor: prefixes (European languages), suffixes (ja, zh)
_BEFORE_PRE = re.compile(
    r"(?:\bbefore|\buntil|\bprior\s+to|\bantes\s+d[eoa]s?|\bantes\s+del?|\bbis|\bvor"
    r"|\bavant)\s+(?:the\s+|o\s+|a\s+|el\s+|la\s+|le\s+|l'|dem\s+|der\s+)?$",
    re.I,
)
_AFTER_PRE = re.compile(
    r"(?:\bafter|\bsince|\bdepois\s+d[eoa]s?|\bdesde|\bdespués\s+del?|\bnach|\bseit"
    r"|\baprès|\bdepuis)\s+(?:the\s+|o\s+|a\s+|el\s+|la\s+|le\s+|l'|dem\s+|der\s+)?$",
    re.I,
)
_BEFORE_POST = re.compile(r"^\s*(?:の前|前|之前|以前|まで)")
_AFTER_POST = re.compile(r"^\s*(?:の後|後|以降|から|之后|之後|以后|以後|后)")
_DATE_LIKE = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2}\.\d{1,2}\.\d{2,4}"
    r"|\d{1,2}\s*月\s*\d{1,2}\s*[日号號]"
    rf"|\b(?:{_MONTH_NAMES})\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th|º|\.)?\s*(?:de\s+|of\s+)?(?:{_MONTH_NAMES})\b"
    rf"(?:,?\s+(?:de\s+)?\d{{4}}\b)?",
    re.I,
)
_PRESENT = re.compile(
    r"\b(?:current(?:ly)?|now|nowadays|still|latest|most\s+recent(?:ly)?|these\s+days"
    r"|at\s+the\s+moment|at\s+present|anymore|any\s+more"
    r"|atual(?:mente)?|agora|ainda|hoje\s+em\s+dia|no\s+momento|mais\s+recente"
    r"|actual(?:mente)?|ahora|todav[ií]a|aún|hoy\s+en\s+d[ií]a|más\s+reciente"
    r"|aktuell(?:e[nmrs]?)?|jetzt|derzeit(?:ig)?|zurzeit|momentan|immer\s+noch|neueste[nmrs]?"
    r"|actuel(?:le)?(?:ment)?|maintenant|en\s+ce\s+moment|toujours|encore|plus\s+récent)\b"
    r"|現在|今(?![日週月年度回朝晩夜天])|いま|まだ|最新|目前|现在|現今|当前|當前|仍然|还在|還在",
    re.I,
)


# --- periods -------------------------------------------------------------------------------
def _day(when: datetime) -> datetime:
    return when.replace(hour=0, minute=0, second=0, microsecond=0)


def _period(unit: str, when: datetime) -> tuple[datetime, datetime]:
    """The calendar day, week (Monday to Monday), month or year holding ``when``."""
    day = _day(when)
    if unit == "day":
        return day, day + _DAY
    if unit == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + 7 * _DAY
    if unit == "month":
        start = day.replace(day=1)
        return start, _add_months(start, 1)
    start = day.replace(month=1, day=1)
    return start, start.replace(year=start.year + 1)


def _add_months(when: datetime, months: int) -> datetime:
    month = when.month - 1 + months
    year, month = when.year + month // 12, month % 12 + 1
    return when.replace(
        year=year, month=month, day=min(when.day, calendar.monthrange(year, month)[1])
    )


def _back(unit: str, now: datetime, n: int) -> datetime:
    """``now`` moved ``n`` units back."""
    if unit == "day":
        return now - n * _DAY
    if unit == "week":
        return now - 7 * n * _DAY
    if unit == "month":
        return _add_months(now, -n)
    return now.replace(year=now.year - n, day=min(now.day, 28) if now.month == 2 else now.day)


def _unit(word: str) -> str:
    for unit, pattern in _UNITS.items():
        if re.fullmatch(pattern, word, re.I):
            return unit
    return "day"


def _number(word: str) -> int:
    word = word.lower()
    if word.isdigit():
        return int(word)
    return _NUMBERS.get(word, 1)


# --- finders: each returns (window start, end, match start, match end) or None --------------
Found = tuple[datetime, datetime, int, int]


def _find_ago(text: str, now: datetime) -> Found | None:
    for pattern in _AGO:
        m = pattern.search(text)
        if m:
            unit, n = _unit(m.group(2)), _number(m.group(1))
            point = _back(unit, now, n)
            start, end = _period(unit, point)
            if unit == "day":  # "two days ago" is said loosely
                start, end = start - _DAY, end + _DAY
            return start, min(end, now + _DAY), m.start(), m.end()
    return None


def _find_past_n(text: str, now: datetime) -> Found | None:
    for pattern in _PAST_N:
        m = pattern.search(text)
        if m:
            groups = [g for g in m.groups() if g]
            n, unit = _number(groups[0]), _unit(groups[1])
            return _day(_back(unit, now, n)), _day(now) + _DAY, m.start(), m.end()
    return None


def _find_named(text: str, now: datetime) -> Found | None:
    for pattern, unit, back in _NAMED_RE:
        m = pattern.search(text)
        if m:
            start, end = _period(unit, _back(unit, now, back))
            return start, end, m.start(), m.end()
    return None


def _find_holiday(text: str, now: datetime) -> Found | None:
    for pattern, when in _HOLIDAY_RE:
        m = pattern.search(text)
        if m:
            year = _year_after(text, m.end())
            day = _holiday(when, year or now.year)
            if year is None and day > now:
                day = _holiday(when, now.year - 1)
            return day, day + _DAY, m.start(), m.end()
    return None


def _holiday(when: Any, year: int) -> datetime:
    if when == "thanksgiving":  # the fourth Thursday of November
        first = datetime(year, 11, 1, tzinfo=UTC)
        return first + timedelta(days=(3 - first.weekday()) % 7 + 21)
    return datetime(year, when[0], when[1], tzinfo=UTC)


def _year_after(text: str, at: int) -> int | None:
    m = re.match(r"\s*(?:of\s+|de\s+)?((?:19|20)\d\d)\b", text[at:])
    return int(m.group(1)) if m else None


def _find_month(text: str, now: datetime) -> Found | None:
    for m in _MONTH_RE.finditer(text):
        name = m.group(1)
        if (
            name.lower() in _ENGLISH_AMBIGUOUS
            and not m.group(2)
            and (not name[0].isupper() or not text[: m.start()].strip())
        ):
            continue  # "may", "march", or "May I…": a verb
        return (*_month_window(_MONTH_OF[name.lower()], m.group(2), now), m.start(), m.end())
    cjk = _CJK_MONTH_RE.search(text)
    if cjk:
        month = _cjk_number(cjk.group(2))
        if 1 <= month <= 12:
            return (*_month_window(month, cjk.group(1), now), cjk.start(), cjk.end())
    return None


def _cjk_number(word: str) -> int:
    if word.isdigit():
        return int(word)
    if word.startswith("十"):
        return 10 + (_CJK_DIGITS.get(word[1:], 0) if len(word) > 1 else 0)
    return _CJK_DIGITS.get(word, 0)


def _month_window(month: int, year: str | None, now: datetime) -> tuple[datetime, datetime]:
    """The month of ``year``; without one, its latest start not after now."""
    at = now.year if year is None else int(year)
    if year is None and month > now.month:
        at -= 1
    start = datetime(at, month, 1, tzinfo=UTC)
    return start, _add_months(start, 1)


def _find_year(text: str, now: datetime) -> Found | None:
    m = _YEAR_RE.search(text)
    if not m:
        return None
    year = int(m.group(1) or m.group(2))
    at = m.start(1) if m.group(1) else m.start(2)
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), at, m.end()


def _find_weekday(text: str, now: datetime) -> Found | None:
    """A weekday with a word that makes it one ("last Saturday", "no sábado passado", "am
    Montag"; a bare Portuguese "segunda" is also "second"); Japanese and Chinese ones alone."""
    for m in _WEEKDAY_RE.finditer(text):
        name = m.group(1)
        if name.isascii() or name[0] in "áéíóúàâçêôãõäöüß":
            if text[m.start(1) - 1 : m.start(1)].isalpha() or m.group(0) == name:
                continue  # inside a word, or with no word making it a day
        weekday = _WEEKDAY_OF[name.lower()]
        back = (now.weekday() - weekday) % 7 or 7  # the latest one before today
        day = _day(now) - back * _DAY
        return day, day + _DAY, m.start(), m.end()
    return None


def _find_written_date(text: str, now: datetime) -> Found | None:
    """A date written out, read by ``dateparser`` (only when a date-like token is there)."""
    m = _DATE_LIKE.search(text)
    if not m:
        return None
    parsed = _dateparser_data(m.group(0), now)
    if parsed is None:
        return None
    when, period = parsed
    start, end = _period(period if period in ("week", "month", "year") else "day", when)
    if start > now and not re.search(r"\d{4}", m.group(0)):  # no year said: the latest one
        start, end = _period("day", when.replace(year=when.year - 1))
    return start, end, m.start(), m.end()


def _dateparser_data(text: str, now: datetime) -> tuple[datetime, str] | None:
    data = _date_parser(now.replace(tzinfo=None)).get_date_data(text)
    if data is None or data.date_obj is None:
        return None
    return data.date_obj.replace(tzinfo=UTC), str(data.period or "day")


@functools.lru_cache(maxsize=8)
def _date_parser(now: datetime) -> Any:
    """A ``dateparser`` parser for our languages relative to ``now`` (building one costs
    tenths of a second; the module is imported on first use for the same reason)."""
    from dateparser.date import DateDataParser

    settings = {"RELATIVE_BASE": now, "PREFER_DATES_FROM": "past",
                "RETURN_AS_TIMEZONE_AWARE": False}  # fmt: skip
    return DateDataParser(languages=list(_LANGUAGES), settings=settings)


_LANGUAGES = ("en", "pt", "es", "de", "fr", "ja", "zh")
# a written date per language: reading the first of a language costs ``dateparser`` about a
# second (its language data), later ones about a millisecond
_WARM_UP = ("May 3rd", "3 de maio", "3 de mayo", "3. Mai", "3 mai", "5月3日", "2023-05-03")


def warm_up() -> None:
    """Load what reading a written date needs, so the first question with one is not slow
    (a service calls it in a thread at start)."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for text in _WARM_UP:
        _dateparser_data(text, now)


# the most specific first: "two weeks ago" before a bare month, a month before its year
_FINDERS = (
    _find_ago,
    _find_past_n,
    _find_named,
    _find_holiday,
    _find_written_date,
    _find_month,
    _find_year,
    _find_weekday,
)


def read_window(query: str, now: datetime) -> TimeWindow | None:
    """The time window ``query`` names relative to ``now`` (an aware UTC time), or None."""
    return _read_window(query, now.astimezone(UTC).replace(second=0, microsecond=0))


@functools.lru_cache(maxsize=1024)
def _read_window(query: str, now: datetime) -> TimeWindow | None:
    for finder in _FINDERS:
        found = finder(query, now)
        if found is not None:
            return _around(query, now, *found)
    return None


def _around(
    query: str, now: datetime, start: datetime, end: datetime, at: int, until: int
) -> TimeWindow:
    """The window of an anchor, or the span before / after it when the query says so (a
    word before the anchor, or in Japanese and Chinese after it)."""
    head, tail = query[:at], query[until:]
    for before, prefix, suffix in ((True, _BEFORE_PRE, _BEFORE_POST),
                                   (False, _AFTER_PRE, _AFTER_POST)):  # fmt: skip
        pre, post = prefix.search(head), suffix.match(tail)
        if pre is None and post is None:
            continue
        if pre is not None:
            at = pre.start()
        else:
            until += post.end() if post is not None else 0
        words = query[at:until].strip()
        if before:
            return TimeWindow(start - max(BEFORE_SPAN, end - start), start, words)
        later = max(now, end) if now > start else start + BEFORE_SPAN
        return TimeWindow(start, later, words)
    return TimeWindow(start, end, query[at:until].strip())


def asks_present(query: str) -> bool:
    """Whether ``query`` asks about the present ("current", "still", "now"… see the module)."""
    return _PRESENT.search(query) is not None
