"""A conversational retrieval set that can tell search methods apart.

The project's first retrieval set (``data/retrieval_set.jsonl``) is saturated: every method
finds 99% of its answers in the top 10. Real conversational memory is harder: many people with
the same kinds of facts (everyone has a job, a city, a pet), questions that share few words
with the answer, questions that need two facts, questions about when something happened,
preferences stated once and asked about later, and memories in other languages among English
ones. This module generates such a set from templates, deterministically:

* each **conversation** is two people over several dated sessions; every person gets the same
  kinds of facts with different values (so the names in a question matter);
* **categories** of questions: ``paraphrase`` (few words shared with the fact),
  ``multi_hop`` (two facts: a relative, then that relative's job or school), ``temporal``
  (when did it happen; the fact carries its date), ``preference`` (a like or dislike stated
  once), ``multilingual`` (a person whose facts are in Brazilian Portuguese, Japanese or
  Chinese, asked about in the same language);
* two **splits** from disjoint people and values: ``dev`` (tune on it) and ``test`` (frozen:
  look at it only to report).

* **what was said** (``said``): besides its facts, each English person has one chat (a
  ``message`` episode) in which they mention details no fact records (a dish they cooked, a
  film, a neighbour's name, something lost); its questions (category ``said``) are answered
  only by the chat's passages, so only ``search_memory`` can find them. These lines are drawn
  from a random stream of their own, after everything else: the memories and questions
  before them are what they were.

``python -m workbench.eval.convo_set --write`` regenerates ``data/search_dev.jsonl`` and
``data/search_test.jsonl``; a test checks the files are exactly what the generator makes.
Lines: ``{"type": "memory", "key", "source", "relation", "target", "fact", "valid_at"?,
"lang"}``, ``{"type": "said", "key", "speaker", "body", "session", "lang"}`` (a chat: its
``body`` is a ``message`` episode) and ``{"type": "question", "id", "question", "answers":
[keys], "category", "lang"}``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "data"
SPLITS = {"dev": 11, "test": 29}  # seeds

# --- values -------------------------------------------------------------------------------
NAMES = {
    "dev": ["Caroline", "Melanie", "Jonah", "Gina", "Audrey", "Andrew", "Priya", "Kenji",
            "Lucia", "Omar", "Hannah", "Marcus", "Sofia", "Daniel", "Leila", "Victor",
            "Nadia", "Tobias", "Elena", "Rafael"],
    "test": ["Beatrice", "Samuel", "Ingrid", "Mateo", "Chloe", "Felix", "Amara", "Dmitri",
             "Yasmin", "Oliver", "Greta", "Hugo", "Mirela", "Theo", "Zara", "Connor",
             "Ines", "Malik", "Petra", "Julian"],
}  # fmt: skip
VALUES: dict[str, list[Any]] = {
    "job": [("nurse", "St. Mary's Hospital"), ("software tester", "Northwind"),
            ("pastry chef", "Le Petit Four"), ("bus driver", "the city transit authority"),
            ("architect", "Stone & Glass Studio"), ("librarian", "the Central Library"),
            ("electrician", "Brightline Services"), ("physiotherapist", "MoveWell Clinic"),
            ("accountant", "Harper & Cole"), ("veterinarian", "Paws Animal Hospital"),
            ("florist", "Petal Market"), ("translator", "Lingua Bridge"),
            ("carpenter", "Oakwood Joinery"), ("pharmacist", "GreenCross Pharmacy"),
            ("tour guide", "Old Town Walks"), ("sound engineer", "Echo Studios")],
    "city": ["Porto", "Edinburgh", "Montreal", "Kyoto", "Valencia", "Tallinn", "Melbourne",
             "Denver", "Ljubljana", "Cape Town", "Bergen", "Oaxaca", "Hamburg", "Seoul"],
    "pet": [("greyhound", "Biscuit"), ("tabby cat", "Miso"), ("parrot", "Captain"),
            ("tortoise", "Pebble"), ("beagle", "Rolo"), ("rabbit", "Clover"),
            ("border collie", "Juniper"), ("goldfish", "Bubbles"), ("hamster", "Nugget"),
            ("ferret", "Ziggy"), ("pug", "Waffles"), ("siamese cat", "Luna")],
    "dislike": ["cilantro", "olives", "blue cheese", "mushrooms", "anchovies", "liquorice",
                "beetroot", "coconut", "mayonnaise", "raw onion", "tofu", "grapefruit"],
    "drink": ["oat-milk flat white", "iced matcha latte", "double espresso",
              "chai with extra cinnamon", "decaf cappuccino", "hot chocolate with marshmallows",
              "cold brew with vanilla", "peppermint tea", "cortado", "lemon and ginger tea"],
    "instrument": ["cello", "ukulele", "trumpet", "harp", "drums", "saxophone", "banjo",
                   "accordion", "flute", "violin", "bass guitar", "clarinet"],
    "allergy": ["peanuts", "shellfish", "sesame", "kiwi", "penicillin", "bee stings",
                "strawberries", "cashews", "wheat", "eggs"],
    "book": ["The Remains of the Day", "Circe", "Project Hail Mary", "Middlemarch",
             "The Overstory", "Pachinko", "Beloved", "Dune", "Klara and the Sun",
             "The Name of the Rose", "Homegoing", "Piranesi"],
    "commute": ["cycles to work every day, even in the rain", "takes the ferry across the bay",
                "walks forty minutes to the office", "rides an electric scooter downtown",
                "drives an old Volvo to work", "takes the night train on Mondays"],
    "race": ["half marathon", "triathlon", "10k fun run", "mountain ultramarathon",
             "open-water swim", "charity bike ride"],
    "country": ["Iceland", "Peru", "Vietnam", "Morocco", "Norway", "New Zealand", "Georgia",
                "Chile", "Scotland", "Japan", "Slovenia", "Jordan"],
    "relative": [("sister", "her"), ("brother", "his"), ("cousin", "their"),
                 ("uncle", "his"), ("aunt", "her")],
    "school": [("Maple Grove Elementary", "Riverside"), ("St. Anne's Primary", "Hillcrest"),
               ("Lakeside Montessori", "the harbour district"), ("Oak Park School", "Northgate"),
               ("Willow Creek Academy", "the old town"), ("Brook Street School", "Eastfield")],
    "kid": ["Leo", "Maya", "Finn", "Ada", "Noah", "Iris", "Milo", "Ruby", "Ezra", "Nina"],
}  # fmt: skip
SAID = {  # details only a chat mentions (no fact template uses them)
    "dish": ["a lentil shepherd's pie", "saffron paella", "a plum crumble", "miso ramen",
             "stuffed peppers", "a lemon drizzle cake", "pumpkin gnocchi", "fish tacos"],
    "film": ["Paper Moon", "The Station Agent", "Amélie", "Local Hero", "Paterson",
             "Groundhog Day", "The Red Turtle", "Columbus"],
    "neighbour": ["Mrs Abernathy", "old Mr Petrov", "a retired pilot called Ruth",
                  "a cellist named Ivo", "the twins Kit and Sam", "a baker called Odile"],
    "lost": ["a green umbrella", "their reading glasses", "a library copy of Emma",
             "a silver bracelet", "the spare house key", "a wool scarf"],
    "game": ["Carcassonne", "backgammon", "Ticket to Ride", "mahjong", "Scrabble", "chess"],
}  # fmt: skip
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]  # fmt: skip


# --- English templates: (relation, fact, [questions]) ---------------------------------------
def english_facts(p: dict[str, Any]) -> list[dict[str, Any]]:
    """One person's memories and the questions about them (answers are memory indexes)."""
    a, on = p["name"], p["dates"]
    job, org = p["job"]
    species, pet = p["pet"]
    rel = p["relative"][0]
    rel_job, rel_org = p["relative_job"]
    school, district = p["school"]
    f: list[dict[str, Any]] = [
        _m(a, "WORKS_AS", org, f"{a} works as a {job} at {org}."),
        _m(a, "LIVES_IN", p["city"], f"{a} moved to {p['city']} and loves the flat by the river."),
        _m(a, "ADOPTED", pet, f"{a} adopted a {species} named {pet} from the shelter.", on["pet"]),
        _m(a, "DISLIKES", p["dislike"], f"{a} can't stand {p['dislike']}, says it ruins any dish."),
        _m(a, "ORDERS", p["drink"], f"{a} always orders a {p['drink']} when we meet for coffee."),
        _m(
            a,
            "PLAYS",
            p["instrument"],
            f"{a} has been practising the {p['instrument']} every evening.",
        ),
        _m(a, "ALLERGIC_TO", p["allergy"], f"{a} is allergic to {p['allergy']}."),
        _m(a, "READING", p["book"], f"{a}'s book club picked {p['book']} this month."),
        _m(a, "COMMUTES", "work", f"{a} {p['commute']}."),
        _m(
            a,
            "COMPLETED",
            p["race"],
            f"{a} finished a {p['race']} in {p['race_city']}.",
            on["race"],
        ),
        _m(
            a,
            "TRAVELLED_TO",
            p["country"],
            f"{a} spent two weeks hiking in {p['country']} with friends.",
            on["trip"],
        ),
        _m(
            a,
            f"HAS_{rel.upper()}",
            p["relative_name"],
            f"{a}'s {rel} is called {p['relative_name']}.",
        ),
        _m(
            p["relative_name"],
            "WORKS_AS",
            rel_org,
            f"{p['relative_name']} is a {rel_job} at {rel_org}.",
        ),
        _m(a, "PARENT_OF", p["kid"], f"{a}'s kid {p['kid']} started at {school} this autumn."),
        _m(school, "LOCATED_IN", district, f"{school} is in {district}."),
    ]
    q = [
        (f"What does {a} do for a living?", [0], "paraphrase"),
        (f"Which town is {a}'s home these days?", [1], "paraphrase"),
        (f"What's the name of {a}'s animal?", [2], "paraphrase"),
        (f"What should I leave out when I cook dinner for {a}?", [3], "preference"),
        (f"What do I get {a} at the café?", [4], "preference"),
        (f"Which musical instrument is {a} learning?", [5], "paraphrase"),
        (f"Is there anything {a} reacts badly to?", [6], "preference"),
        (f"Which novel is {a}'s reading group discussing?", [7], "paraphrase"),
        (f"How does {a} get to the office?", [8], "paraphrase"),
        (f"When did {a} bring the {species} home?", [2], "temporal"),
        (f"When was {a}'s {p['race']}?", [9], "temporal"),
        (f"When did {a} go trekking abroad?", [10], "temporal"),
        (f"Where does {a}'s {rel} work?", [11, 12], "multi_hop"),
        (f"In which neighbourhood is the school of {a}'s child?", [13, 14], "multi_hop"),
    ]
    return _with_questions(f, q)


# --- other languages ----------------------------------------------------------------------
LANG_VALUES: dict[str, dict[str, list[Any]]] = {
    "pt": {
        "names": ["Ana Souza", "João Pereira", "Beatriz Lima", "Rafael Costa", "Camila Rocha",
                  "Lucas Almeida"],
        "job": [("enfermeira", "Hospital Santa Casa"), ("professor de química", "Colégio Estadual"),
                ("confeiteira", "Doceria Bom Gosto"), ("motorista de ônibus", "a SPTrans"),
                ("arquiteta", "Estúdio Concreto"), ("dentista", "Clínica Sorriso")],
        "city": ["Recife", "Curitiba", "Salvador", "Florianópolis", "Belo Horizonte", "Manaus"],
        "pet": [("vira-lata", "Pipoca"), ("gata", "Mel"), ("papagaio", "Louro"),
                ("tartaruga", "Tiquinho"), ("beagle", "Bolota"), ("coelho", "Fubá")],
        "drink": ["cafezinho sem açúcar", "suco de maracujá", "chá de hortelã",
                  "cappuccino com canela", "caldo de cana", "café com leite"],
        "instrument": ["violão", "cavaquinho", "pandeiro", "flauta", "sanfona", "bateria"],
        "allergy": ["camarão", "amendoim", "leite", "morango", "castanha", "ovo"],
    },
    "ja": {
        "names": ["佐藤さくら", "鈴木健太", "高橋美咲", "田中翔", "伊藤陽菜", "渡辺大輔"],
        "job": [("看護師", "市民病院"), ("小学校の先生", "桜小学校"), ("パン職人", "こむぎ工房"),
                ("バスの運転手", "市営バス"), ("建築士", "森設計事務所"), ("薬剤師", "ひかり薬局")],
        "city": ["札幌", "福岡", "金沢", "仙台", "那覇", "神戸"],
        "pet": [("柴犬", "コタロウ"), ("三毛猫", "ミケ"), ("インコ", "ピーちゃん"),
                ("うさぎ", "モカ"), ("ハムスター", "だいふく"), ("金魚", "キンちゃん")],
        "drink": ["抹茶ラテ", "ほうじ茶", "アイスコーヒー", "カフェオレ", "ミルクティー", "ココア"],
        "instrument": ["ピアノ", "三味線", "ギター", "バイオリン", "尺八", "ドラム"],
        "allergy": ["そば", "えび", "卵", "小麦", "ピーナッツ", "牛乳"],
    },
    "zh": {
        "names": ["王芳", "李娜", "张伟", "刘洋", "陈静", "杨磊"],
        "job": [("护士", "人民医院"), ("中学老师", "第一中学"), ("面包师", "麦香烘焙坊"),
                ("公交司机", "城市公交公司"), ("建筑师", "华筑设计院"), ("药剂师", "仁心药房")],
        "city": ["成都", "杭州", "西安", "厦门", "青岛", "昆明"],
        "pet": [("金毛犬", "豆豆"), ("橘猫", "大橘"), ("鹦鹉", "小绿"), ("乌龟", "慢慢"),
                ("仓鼠", "团子"), ("兔子", "雪球")],
        "drink": ["珍珠奶茶", "美式咖啡", "菊花茶", "拿铁", "柠檬茶", "豆浆"],
        "instrument": ["古筝", "二胡", "钢琴", "吉他", "笛子", "琵琶"],
        "allergy": ["花生", "虾", "芒果", "牛奶", "鸡蛋", "海鲜"],
    },
}  # fmt: skip


def foreign_facts(lang: str, p: dict[str, Any]) -> list[dict[str, Any]]:
    a = p["name"]
    job, org = p["job"]
    species, pet = p["pet"]
    if lang == "pt":
        f = [
            _m(a, "WORKS_AS", org, f"{a} trabalha como {job} em {org}.", lang=lang),
            _m(
                a,
                "LIVES_IN",
                p["city"],
                f"{a} se mudou para {p['city']} e adora o apartamento perto da praia.",
                lang=lang,
            ),
            _m(a, "ADOPTED", pet, f"{a} adotou um {species} chamado {pet} no abrigo.", lang=lang),
            _m(
                a,
                "ORDERS",
                p["drink"],
                f"{a} sempre pede {p['drink']} quando a gente se encontra na padaria.",
                lang=lang,
            ),
            _m(
                a,
                "PLAYS",
                p["instrument"],
                f"{a} está aprendendo a tocar {p['instrument']} todas as noites.",
                lang=lang,
            ),
            _m(a, "ALLERGIC_TO", p["allergy"], f"{a} tem alergia a {p['allergy']}.", lang=lang),
        ]
        q = [
            (f"Qual é a profissão de {a}?", [0]),
            (f"Em que cidade {a} vive atualmente?", [1]),
            (f"Como se chama o bichinho de estimação de {a}?", [2]),
            (f"O que eu levo para {a} quando for à cafeteria?", [3]),
            (f"Que instrumento musical {a} anda praticando?", [4]),
            (f"Tem algum alimento que faz mal para {a}?", [5]),
        ]
    elif lang == "ja":
        f = [
            _m(a, "WORKS_AS", org, f"{a}さんは{org}で{job}として働いています。", lang=lang),
            _m(
                a,
                "LIVES_IN",
                p["city"],
                f"{a}さんは{p['city']}に引っ越して、川沿いの部屋を気に入っています。",
                lang=lang,
            ),
            _m(
                a,
                "ADOPTED",
                pet,
                f"{a}さんは保護施設から{pet}という名前の{species}を引き取りました。",
                lang=lang,
            ),
            _m(
                a,
                "ORDERS",
                p["drink"],
                f"{a}さんはカフェで会うといつも{p['drink']}を注文します。",
                lang=lang,
            ),
            _m(
                a,
                "PLAYS",
                p["instrument"],
                f"{a}さんは毎晩{p['instrument']}の練習をしています。",
                lang=lang,
            ),
            _m(
                a,
                "ALLERGIC_TO",
                p["allergy"],
                f"{a}さんは{p['allergy']}のアレルギーがあります。",
                lang=lang,
            ),
        ]
        q = [
            (f"{a}さんの職業は何ですか？", [0]),
            (f"{a}さんは今どの街で暮らしていますか？", [1]),
            (f"{a}さんが飼っている動物の名前は？", [2]),
            (f"喫茶店で{a}さんに何を買っていけばいいですか？", [3]),
            (f"{a}さんが習っている楽器は何ですか？", [4]),
            (f"{a}さんが食べられないものはありますか？", [5]),
        ]
    else:
        f = [
            _m(a, "WORKS_AS", org, f"{a}在{org}当{job}。", lang=lang),
            _m(
                a, "LIVES_IN", p["city"], f"{a}搬到了{p['city']}，很喜欢河边的那套公寓。", lang=lang
            ),
            _m(a, "ADOPTED", pet, f"{a}从收容所领养了一只叫{pet}的{species}。", lang=lang),
            _m(
                a,
                "ORDERS",
                p["drink"],
                f"我们在咖啡馆见面时，{a}总是点一杯{p['drink']}。",
                lang=lang,
            ),
            _m(a, "PLAYS", p["instrument"], f"{a}每天晚上都在练习{p['instrument']}。", lang=lang),
            _m(a, "ALLERGIC_TO", p["allergy"], f"{a}对{p['allergy']}过敏。", lang=lang),
        ]
        q = [
            (f"{a}是做什么工作的？", [0]),
            (f"{a}目前在哪座城市生活？", [1]),
            (f"{a}养的宠物叫什么名字？", [2]),
            (f"去饮品店应该给{a}买什么？", [3]),
            (f"{a}在学哪种乐器？", [4]),
            (f"有什么东西是{a}不能吃的？", [5]),
        ]
    return _with_questions(f, [(text, answers, "multilingual") for text, answers in q])


# --- what was said: chats whose details no fact holds --------------------------------------
def said_chat(p: dict[str, Any], friend: str) -> tuple[str, list[tuple[str, str]]]:
    """A chat between ``p`` and ``friend`` (a ``message`` episode's body) and the questions
    only it answers, as (question, category)."""
    a = p["name"]
    body = "\n".join([
        f"{friend}: How was your weekend?",
        f"{a}: Busy! I cooked {p['dish']} for the street party and it vanished in minutes.",
        f"{friend}: Ha, I knew it. Did you watch anything?",
        f"{a}: {p['film']}, twice in a row. Then I lost {p['lost']} on the tram home.",
        f"{friend}: Oh no. Who else was at the party?",
        f"{a}: My neighbour, {p['neighbour']}, who beat everyone at {p['game']} afterwards.",
    ])  # fmt: skip
    return body, [
        (f"What did {a} cook for the street party?", "said"),
        (f"Which film did {a} watch twice?", "said"),
        (f"What did {a} leave behind on the tram?", "said"),
        (f"Who is {a}'s neighbour?", "said"),
        (f"Which game did {a}'s neighbour win at?", "said"),
    ]


def said_lines(
    split: str, english: list[dict[str, Any]], first_question: int
) -> list[dict[str, Any]]:
    """The chats of the English people of a split and their questions (a random stream of
    its own: the lines before these stay as they were)."""
    rng = random.Random(SPLITS[split] + 1000)
    pools = _Pools(rng)
    chats: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for number, person in enumerate(english):
        detail = {kind: pools.pick(f"said_{kind}", values) for kind, values in SAID.items()}
        friend = english[(number + 1) % len(english)]["name"]
        body, asked = said_chat({**person, **detail}, friend)
        key = f"{split}-s{number + 1:04d}"
        chats.append({"type": "said", "key": key, "speaker": person["name"], "body": body,
                      "session": number // 2 + 1, "lang": "en"})  # fmt: skip
        for question, category in asked:
            questions.append({"type": "question",
                              "id": f"{split}-q{first_question + len(questions) + 1:04d}",
                              "question": question, "answers": [key], "category": category,
                              "lang": "en"})  # fmt: skip
    return chats + questions


# --- assembly -----------------------------------------------------------------------------
def _m(
    source: str,
    relation: str,
    target: str,
    fact: str,
    valid_at: date | None = None,
    lang: str = "en",
) -> dict[str, Any]:
    out = {"source": source, "relation": relation, "target": target, "fact": fact, "lang": lang}
    if valid_at is not None:
        out["valid_at"] = valid_at.isoformat()
    return out


def _with_questions(
    facts: list[dict[str, Any]], questions: Iterable[tuple[str, list[int], str]]
) -> list[dict[str, Any]]:
    return facts + [{"question": q, "answers": a, "category": c} for q, a, c in questions]


@dataclass
class _Pools:
    rng: random.Random
    used: dict[str, set[str]] = field(default_factory=dict)

    def pick(self, kind: str, values: list[Any]) -> Any:
        """A value not yet used in this split when possible (people differ)."""
        taken = self.used.setdefault(kind, set())
        free = [v for v in values if repr(v) not in taken] or values
        value = self.rng.choice(free)
        taken.add(repr(value))
        if len(taken) >= len(values):
            taken.clear()
        return value


def build(split: str) -> list[dict[str, Any]]:
    """The lines of one split (memories first, then questions, then the chats and theirs)."""
    rng = random.Random(SPLITS[split])
    pools = _Pools(rng)
    names = list(NAMES[split])
    rng.shuffle(names)
    start = date(2023, 1, 9) if split == "dev" else date(2023, 2, 6)
    memories: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    people: list[tuple[str, dict[str, Any]]] = [("en", _person(n, pools, start, i))
                                                for i, n in enumerate(names)]  # fmt: skip
    for lang, values in LANG_VALUES.items():
        for i, name in enumerate(values["names"][:3] if split == "dev" else values["names"][3:]):
            people.append((lang, _foreign_person(name, values, pools, i)))
    seen: dict[str, str] = {}
    for number, (lang, person) in enumerate(people):
        items = english_facts(person) if lang == "en" else foreign_facts(lang, person)
        keys = []
        for item in (i for i in items if "fact" in i):
            same = seen.get(item["fact"])  # a school two children attend: one memory
            if same is not None:
                keys.append(same)
                continue
            key = seen[item["fact"]] = f"{split}-m{len(memories) + 1:04d}"
            keys.append(key)
            memories.append({"type": "memory", "key": key, **item,
                             "session": number // 2 + 1})  # fmt: skip
        for item in (i for i in items if "question" in i):
            questions.append(
                {
                    "type": "question",
                    "id": f"{split}-q{len(questions) + 1:04d}",
                    "question": item["question"],
                    "answers": [keys[a] for a in item["answers"]],
                    "category": item["category"],
                    "lang": lang,
                }
            )
    english = [person for lang, person in people if lang == "en"]
    return memories + questions + said_lines(split, english, len(questions))


def _person(name: str, pools: _Pools, start: date, index: int) -> dict[str, Any]:
    first_session = start + timedelta(days=14 * (index // 2))

    def day(offset: int) -> date:
        return first_session + timedelta(days=offset + pools.rng.randrange(0, 20))

    return {
        "name": name,
        "job": pools.pick("job", VALUES["job"]),
        "city": pools.pick("city", VALUES["city"]),
        "pet": pools.pick("pet", VALUES["pet"]),
        "dislike": pools.pick("dislike", VALUES["dislike"]),
        "drink": pools.pick("drink", VALUES["drink"]),
        "instrument": pools.pick("instrument", VALUES["instrument"]),
        "allergy": pools.pick("allergy", VALUES["allergy"]),
        "book": pools.pick("book", VALUES["book"]),
        "commute": pools.pick("commute", VALUES["commute"]),
        "race": pools.pick("race", VALUES["race"]),
        "race_city": pools.pick("race_city", VALUES["city"]),
        "country": pools.pick("country", VALUES["country"]),
        "relative": pools.pick("relative", VALUES["relative"]),
        "relative_name": pools.pick("relative_name", NAMES["dev"] + NAMES["test"])
        + " "
        + pools.pick(
            "surname",
            [
                "Okafor",
                "Lindqvist",
                "Moreau",
                "Tanaka",
                "Novak",
                "Reyes",
                "Brennan",
                "Haddad",
                "Kowalski",
                "Ferreira",
            ],
        ),  # fmt: skip
        "relative_job": pools.pick("job2", VALUES["job"]),
        "kid": pools.pick("kid", VALUES["kid"]),
        "school": pools.pick("school", VALUES["school"]),
        "dates": {"pet": day(0), "race": day(30), "trip": day(60)},
    }


def _foreign_person(
    name: str, values: dict[str, list[Any]], pools: _Pools, i: int
) -> dict[str, Any]:
    def lang_pick(kind: str) -> Any:
        return values[kind][(i + pools.rng.randrange(6)) % len(values[kind])]

    return {"name": name, **{k: lang_pick(k) for k in ("job", "city", "pet", "drink",
                                                        "instrument", "allergy")}}  # fmt: skip


def write(folder: Path = DATA) -> dict[str, Path]:
    out = {}
    for split in SPLITS:
        path = folder / f"search_{split}.jsonl"
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n"
                                for line in build(split)), encoding="utf-8")  # fmt: skip
        out[split] = path
    return out


if __name__ == "__main__":  # python -m workbench.eval.convo_set --write
    import sys

    if "--write" in sys.argv:
        for split, path in write().items():
            print(split, path)
    else:
        lines = build("dev")
        print(json.dumps([x for x in lines if x["type"] == "question"][:5], indent=1))
