"""The sample corpus's lexicon: German and English word lists (pronouns, people, objects,
adjectives, verbs, places, times) and the German inflection tables that
scripts/make_sample_corpus.py builds its sentences from."""

from __future__ import annotations

from dataclasses import dataclass

PRONOUNS = [  # (german, person 0..5 = ich du er/sie wir ihr sie, english)
    ("ich", 0, "I"), ("du", 1, "you"), ("er", 2, "he"), ("sie", 2, "she"),
    ("wir", 3, "we"), ("ihr", 4, "you"), ("sie", 5, "they"),
]  # fmt: skip


@dataclass(frozen=True)
class Noun:
    de: str
    gender: str  # m, f, n
    de_pl: str | None  # None: a mass noun (no plural, no indefinite article)
    en: str
    en_pl: str | None
    tags: frozenset[str]
    weak: str | None = None  # accusative/dative singular of weak masculines: den Jungen


def noun(de, gender, de_pl, en, en_pl, tags, weak=None) -> Noun:
    return Noun(de, gender, de_pl, en, en_pl, frozenset(tags.split()), weak)


PEOPLE = [
    noun("Mann", "m", "Männer", "man", "men", "person"),
    noun("Frau", "f", "Frauen", "woman", "women", "person"),
    noun("Kind", "n", "Kinder", "child", "children", "person"),
    noun("Junge", "m", "Jungen", "boy", "boys", "person", weak="Jungen"),
    noun("Mädchen", "n", "Mädchen", "girl", "girls", "person"),
    noun("Lehrer", "m", "Lehrer", "teacher", "teachers", "person"),
    noun("Lehrerin", "f", "Lehrerinnen", "teacher", "teachers", "person"),
    noun("Arzt", "m", "Ärzte", "doctor", "doctors", "person"),
    noun("Ärztin", "f", "Ärztinnen", "doctor", "doctors", "person"),
    noun("Student", "m", "Studenten", "student", "students", "person", weak="Studenten"),
    noun("Nachbar", "m", "Nachbarn", "neighbour", "neighbours", "person", weak="Nachbarn"),
    noun("Nachbarin", "f", "Nachbarinnen", "neighbour", "neighbours", "person"),
    noun("Koch", "m", "Köche", "cook", "cooks", "person"),
    noun("Freund", "m", "Freunde", "friend", "friends", "person"),
    noun("Freundin", "f", "Freundinnen", "friend", "friends", "person"),
    noun("Bruder", "m", "Brüder", "brother", "brothers", "person family"),
    noun("Schwester", "f", "Schwestern", "sister", "sisters", "person family"),
    noun("Vater", "m", "Väter", "father", "fathers", "person family"),
    noun("Mutter", "f", "Mütter", "mother", "mothers", "person family"),
    noun("Großvater", "m", "Großväter", "grandfather", "grandfathers", "person family"),
    noun("Großmutter", "f", "Großmütter", "grandmother", "grandmothers", "person family"),
]

OBJECTS = [
    noun("Apfel", "m", "Äpfel", "apple", "apples", "food"),
    noun("Banane", "f", "Bananen", "banana", "bananas", "food"),
    noun("Kuchen", "m", "Kuchen", "cake", "cakes", "food"),
    noun("Ei", "n", "Eier", "egg", "eggs", "food cook"),
    noun("Tomate", "f", "Tomaten", "tomato", "tomatoes", "food"),
    noun("Orange", "f", "Orangen", "orange", "oranges", "food"),
    noun("Kartoffel", "f", "Kartoffeln", "potato", "potatoes", "food cook"),
    noun("Suppe", "f", "Suppen", "soup", "soups", "food cook"),
    noun("Salat", "m", "Salate", "salad", "salads", "food"),
    noun("Fisch", "m", "Fische", "fish", "fish", "food cook"),
    noun("Keks", "m", "Kekse", "biscuit", "biscuits", "food"),
    noun("Brot", "n", None, "bread", None, "food"),
    noun("Käse", "m", None, "cheese", None, "food"),
    noun("Reis", "m", None, "rice", None, "food cook"),
    noun("Fleisch", "n", None, "meat", None, "food cook"),
    noun("Schokolade", "f", None, "chocolate", None, "food"),
    noun("Kaffee", "m", None, "coffee", None, "drink"),
    noun("Tee", "m", None, "tea", None, "drink"),
    noun("Wasser", "n", None, "water", None, "drink"),
    noun("Milch", "f", None, "milk", None, "drink"),
    noun("Saft", "m", None, "juice", None, "drink"),
    noun("Wein", "m", None, "wine", None, "drink"),
    noun("Buch", "n", "Bücher", "book", "books", "read write"),
    noun("Zeitung", "f", "Zeitungen", "newspaper", "newspapers", "read"),
    noun("Brief", "m", "Briefe", "letter", "letters", "read write open lose"),
    noun("Zeitschrift", "f", "Zeitschriften", "magazine", "magazines", "read"),
    noun("Geschichte", "f", "Geschichten", "story", "stories", "read write"),
    noun("Roman", "m", "Romane", "novel", "novels", "read write"),
    noun("Gedicht", "n", "Gedichte", "poem", "poems", "read write"),
    noun("Nachricht", "f", "Nachrichten", "message", "messages", "read write"),
    noun("Tasche", "f", "Taschen", "bag", "bags", "thing open carry lose"),
    noun("Schlüssel", "m", "Schlüssel", "key", "keys", "thing lose"),
    noun("Stuhl", "m", "Stühle", "chair", "chairs", "thing carry repair"),
    noun("Tisch", "m", "Tische", "table", "tables", "thing repair"),
    noun("Lampe", "f", "Lampen", "lamp", "lamps", "thing carry repair"),
    noun("Fahrrad", "n", "Fahrräder", "bicycle", "bicycles", "thing wash repair"),
    noun("Auto", "n", "Autos", "car", "cars", "thing wash repair"),
    noun("Uhr", "f", "Uhren", "watch", "watches", "thing repair lose"),
    noun("Hut", "m", "Hüte", "hat", "hats", "thing lose"),
    noun("Jacke", "f", "Jacken", "jacket", "jackets", "thing wash"),
    noun("Tasse", "f", "Tassen", "cup", "cups", "thing wash carry"),
    noun("Flasche", "f", "Flaschen", "bottle", "bottles", "thing open carry"),
    noun("Fenster", "n", "Fenster", "window", "windows", "thing open wash"),
    noun("Tür", "f", "Türen", "door", "doors", "thing open repair paint"),
    noun("Kiste", "f", "Kisten", "box", "boxes", "thing open carry"),
    noun("Computer", "m", "Computer", "computer", "computers", "thing repair"),
    noun("Telefon", "n", "Telefone", "phone", "phones", "thing repair lose"),
    noun("Ball", "m", "Bälle", "ball", "balls", "thing lose"),
    noun("Bild", "n", "Bilder", "picture", "pictures", "thing carry"),
    noun("Haus", "n", "Häuser", "house", "houses", "thing paint"),
    noun("Blume", "f", "Blumen", "flower", "flowers", "thing paint carry"),
    noun("Regenschirm", "m", "Regenschirme", "umbrella", "umbrellas", "thing lose"),
    noun("Teller", "m", "Teller", "plate", "plates", "thing wash carry"),
    noun("Koffer", "m", "Koffer", "suitcase", "suitcases", "thing open carry"),
    noun("Hund", "m", "Hunde", "dog", "dogs", "animal paint"),
    noun("Katze", "f", "Katzen", "cat", "cats", "animal paint"),
    noun("Pferd", "n", "Pferde", "horse", "horses", "animal paint"),
    noun("Vogel", "m", "Vögel", "bird", "birds", "animal paint"),
    noun("Kuh", "f", "Kühe", "cow", "cows", "animal"),
    noun("Maus", "f", "Mäuse", "mouse", "mice", "animal"),
    noun("Hase", "m", "Hasen", "rabbit", "rabbits", "animal", weak="Hasen"),
    noun("Ente", "f", "Enten", "duck", "ducks", "animal"),
]

ADJECTIVES = {  # tag -> (german stem, english)
    "person": [("alt", "old"), ("jung", "young"), ("nett", "nice"), ("müde", "tired"),
               ("glücklich", "happy"), ("hungrig", "hungry"), ("krank", "sick"),
               ("traurig", "sad"), ("ruhig", "quiet"), ("fleißig", "busy")],
    "food": [("frisch", "fresh"), ("lecker", "tasty"), ("warm", "warm"), ("kalt", "cold"),
             ("süß", "sweet"), ("groß", "big"), ("klein", "small")],
    "drink": [("kalt", "cold"), ("heiß", "hot"), ("frisch", "fresh"), ("süß", "sweet"),
              ("warm", "warm")],
    "read": [("neu", "new"), ("alt", "old"), ("interessant", "interesting"),
             ("langweilig", "boring"), ("lang", "long"), ("kurz", "short"),
             ("spannend", "exciting")],
    "thing": [("rot", "red"), ("blau", "blue"), ("grün", "green"), ("schwarz", "black"),
              ("weiß", "white"), ("groß", "big"), ("klein", "small"), ("neu", "new"),
              ("alt", "old"), ("schön", "beautiful"), ("teuer", "expensive"),
              ("billig", "cheap"), ("schwer", "heavy")],
    "animal": [("klein", "little"), ("groß", "big"), ("schwarz", "black"), ("weiß", "white"),
               ("jung", "young"), ("alt", "old"), ("braun", "brown"), ("hungrig", "hungry")],
}  # fmt: skip


@dataclass(frozen=True)
class Verb:
    forms: tuple[str, ...]  # ich du er wir ihr sie
    participle: str
    en: tuple[str, str, str, str]  # base, 3rd singular, past, past participle
    objects: frozenset[str]

    @property
    def infinitive(self) -> str:
        return self.forms[3]


def verb(forms, participle, en, objects) -> Verb:
    if isinstance(forms, str):  # a regular stem: kauf -> kaufe kaufst kauft kaufen kauft kaufen
        forms = [forms + e for e in ("e", "st", "t", "en", "t", "en")]
    return Verb(tuple(forms), participle, tuple(en.split("|")), frozenset(objects.split()))


HABEN = ["habe", "hast", "hat", "haben", "habt", "haben"]
VERBS = [
    verb(["sehe", "siehst", "sieht", "sehen", "seht", "sehen"], "gesehen",
         "see|sees|saw|seen", "animal thing person food read"),
    verb("kauf", "gekauft", "buy|buys|bought|bought", "food drink read thing animal"),
    verb(["lese", "liest", "liest", "lesen", "lest", "lesen"], "gelesen",
         "read|reads|read|read", "read"),
    verb("schreib", "geschrieben", "write|writes|wrote|written", "write"),
    verb("trink", "getrunken", "drink|drinks|drank|drunk", "drink"),
    verb(["esse", "isst", "isst", "essen", "esst", "essen"], "gegessen",
         "eat|eats|ate|eaten", "food"),
    verb("koch", "gekocht", "cook|cooks|cooked|cooked", "cook"),
    verb("such", "gesucht", "look for|looks for|looked for|looked for", "thing animal person"),
    verb(["finde", "findest", "findet", "finden", "findet", "finden"], "gefunden",
         "find|finds|found|found", "thing animal read"),
    verb("brauch", "gebraucht", "need|needs|needed|needed", "thing food drink read"),
    verb(["nehme", "nimmst", "nimmt", "nehmen", "nehmt", "nehmen"], "genommen",
         "take|takes|took|taken", "thing food read"),
    verb(HABEN, "gehabt",
         "have|has|had|had", "thing animal"),
    verb(["mag", "magst", "mag", "mögen", "mögt", "mögen"], "gemocht",
         "like|likes|liked|liked", "food drink animal person read"),
    verb("bring", "gebracht", "bring|brings|brought|brought", "thing food drink read"),
    verb("verkauf", "verkauft", "sell|sells|sold|sold", "thing animal read food"),
    verb(["wasche", "wäschst", "wäscht", "waschen", "wascht", "waschen"], "gewaschen",
         "wash|washes|washed|washed", "wash"),
    verb(["vergesse", "vergisst", "vergisst", "vergessen", "vergesst", "vergessen"], "vergessen",
         "forget|forgets|forgot|forgotten", "thing read"),
    verb(["trage", "trägst", "trägt", "tragen", "tragt", "tragen"], "getragen",
         "carry|carries|carried|carried", "carry"),
    verb(["öffne", "öffnest", "öffnet", "öffnen", "öffnet", "öffnen"], "geöffnet",
         "open|opens|opened|opened", "open"),
    verb("besuch", "besucht", "visit|visits|visited|visited", "person"),
    verb("frag", "gefragt", "ask|asks|asked|asked", "person"),
    verb(["kenne", "kennst", "kennt", "kennen", "kennt", "kennen"], "gekannt",
         "know|knows|knew|known", "person"),
    verb(["treffe", "triffst", "trifft", "treffen", "trefft", "treffen"], "getroffen",
         "meet|meets|met|met", "person"),
    verb(["füttere", "fütterst", "füttert", "füttern", "füttert", "füttern"], "gefüttert",
         "feed|feeds|fed|fed", "animal"),
    verb("mal", "gemalt", "paint|paints|painted|painted", "paint"),
    verb("reparier", "repariert", "repair|repairs|repaired|repaired", "repair"),
    verb(["verliere", "verlierst", "verliert", "verlieren", "verliert", "verlieren"], "verloren",
         "lose|loses|lost|lost", "lose"),
]  # fmt: skip

MODALS = [  # forms, english for 3rd singular / others
    (["kann", "kannst", "kann", "können", "könnt", "können"], "can", "can"),
    (["will", "willst", "will", "wollen", "wollt", "wollen"], "wants to", "want to"),
    (["muss", "musst", "muss", "müssen", "müsst", "müssen"], "must", "must"),
    (["möchte", "möchtest", "möchte", "möchten", "möchtet", "möchten"],
     "would like to", "would like to"),
]  # fmt: skip
SEIN = ["bin", "bist", "ist", "sind", "seid", "sind"]
BE = ["am", "are", "is", "are", "are", "are"]

PLACES = [
    ("im Park", "in the park"), ("im Garten", "in the garden"), ("in der Küche", "in the kitchen"),
    ("in der Schule", "at school"), ("im Büro", "in the office"), ("am Bahnhof", "at the station"),
    ("zu Hause", "at home"), ("in der Stadt", "in town"), ("im Café", "in the café"),
    ("auf dem Markt", "at the market"), ("in der Bibliothek", "in the library"),
    ("im Zug", "on the train"), ("im Bus", "on the bus"), ("am See", "at the lake"),
    ("im Restaurant", "in the restaurant"), ("im Supermarkt", "at the supermarket"),
    ("am Strand", "on the beach"), ("im Wald", "in the forest"),
]  # fmt: skip
TIMES_NOW = [
    ("heute", "today"), ("jeden Tag", "every day"), ("jeden Morgen", "every morning"),
    ("am Abend", "in the evening"), ("am Wochenende", "at the weekend"), ("jetzt", "now"),
    ("am Montag", "on Monday"), ("am Sonntag", "on Sunday"), ("im Sommer", "in summer"),
    ("im Winter", "in winter"),
]  # fmt: skip
TIMES_PAST = [
    ("gestern", "yesterday"), ("letzte Woche", "last week"), ("letztes Jahr", "last year"),
    ("gestern Abend", "last night"), ("am Freitag", "on Friday"),
    ("vor zwei Tagen", "two days ago"),
]  # fmt: skip
FREQUENCY = [("oft", "often"), ("immer", "always"), ("manchmal", "sometimes"),
             ("selten", "rarely"), ("nie", "never")]  # fmt: skip
NUMBERS = [("zwei", "two"), ("drei", "three"), ("vier", "four"), ("fünf", "five"),
           ("viele", "many")]  # fmt: skip
OPINIONS = [("ich glaube", "I think"), ("sie sagt", "she says"), ("wir wissen", "we know"),
            ("er hofft", "he hopes"), ("es ist klar", "it is clear"),
            ("meine Mutter sagt", "my mother says")]  # fmt: skip

# ------------------------------------------------------------------------ grammar

# Determiners by (kind, case) -> [m, f, n, plural]; None: no article.
DETERMINERS = {
    ("def", "nom"): ["der", "die", "das", "die"],
    ("def", "acc"): ["den", "die", "das", "die"],
    ("def", "dat"): ["dem", "der", "dem", "den"],
    ("indef", "nom"): ["ein", "eine", "ein", None],
    ("indef", "acc"): ["einen", "eine", "ein", None],
    ("indef", "dat"): ["einem", "einer", "einem", None],
    ("kein", "acc"): ["keinen", "keine", "kein", "keine"],
}
POSSESSIVES = [("mein", "my"), ("dein", "your"), ("sein", "his"), ("ihr", "her"), ("unser", "our")]
POSSESSIVE_ENDINGS = {"nom": ["", "e", "", "e"], "acc": ["en", "e", "", "e"],
                      "dat": ["em", "er", "em", "en"]}  # fmt: skip
# Adjective endings after a definite article, after ein/kein/mein, and with no article.
WEAK = {"nom": ["e", "e", "e", "en"], "acc": ["en", "e", "e", "en"], "dat": ["en"] * 4}
MIXED = {"nom": ["er", "e", "es", "en"], "acc": ["en", "e", "es", "en"], "dat": ["en"] * 4}
STRONG = {"nom": ["er", "e", "es", "e"], "acc": ["en", "e", "es", "e"],
          "dat": ["em", "er", "em", "en"]}  # fmt: skip
SLOT = {"m": 0, "f": 1, "n": 2}
SPOUSES = {"Mann": ("husband", "husbands"), "Frau": ("wife", "wives")}
