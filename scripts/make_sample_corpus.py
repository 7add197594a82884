"""Write the built-in sample corpus (``data=sample``): German-English pairs from our own word lists
and sentence templates, with German conjugation, case, gender and adjective endings done right.

    python scripts/make_sample_corpus.py --out /tmp/sample   # translate/resources/sample's files

The output depends only on ``--seed`` and the sizes. Every German sentence appears once in the
whole corpus, and no validation or test pair shares its German or its English with a training pair.
The templates cover word order a model has to learn (verb-second after a fronted time phrase,
verb-final in subordinate clauses and after modals and in the perfect, questions, negation with
``nicht`` and ``kein``), so the task is small but not word-for-word.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from sample_lexicon import (  # scripts/sample_lexicon.py, beside this script
    ADJECTIVES,
    BE,
    DETERMINERS,
    FREQUENCY,
    HABEN,
    MIXED,
    MODALS,
    NUMBERS,
    OBJECTS,
    OPINIONS,
    PEOPLE,
    PLACES,
    POSSESSIVE_ENDINGS,
    POSSESSIVES,
    PRONOUNS,
    SEIN,
    SLOT,
    SPOUSES,
    STRONG,
    TIMES_NOW,
    TIMES_PAST,
    VERBS,
    WEAK,
    Noun,
    Verb,
)

from translate import io
from translate.errors import EXIT_USER_ERROR, UserError

OUT = Path(__file__).resolve().parents[1] / "translate" / "resources" / "sample"


def a_or_an(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def adjective(stem: str, ending: str) -> str:
    if stem == "teuer" and ending:
        return "teur" + ending  # teure, teuren
    if stem.endswith("e") and ending.startswith("e"):
        return stem + ending[1:]  # müde -> müden
    return stem + ending


def noun_phrase(rng, n: Noun, case: str, kind: str, plural: bool, adj=None) -> tuple[str, str]:
    """German and English for ``n`` with determiner ``kind`` (def, indef, poss, kein, number)
    and an optional (german stem, english) adjective."""
    slot = 3 if plural else SLOT[n.gender]
    de_noun = n.de_pl if plural else (n.weak if n.weak and case != "nom" else n.de)
    if plural and case == "dat" and not de_noun.endswith(("n", "s")):
        de_noun += "n"  # mit den Kindern
    if kind == "poss":
        stem, en_det = rng.choice(POSSESSIVES)
        de_det, endings = stem + POSSESSIVE_ENDINGS[case][slot], MIXED
    elif kind == "number":
        (de_det, en_det), endings = rng.choice(NUMBERS), STRONG
    else:
        mass = n.de_pl is None
        de_det = None if kind == "indef" and mass else DETERMINERS[(kind, case)][slot]
        endings = WEAK if kind == "def" else MIXED if de_det else STRONG
        count_singular = not plural and not mass
        en_det = "the" if kind == "def" else "a" if kind == "indef" and count_singular else ""
    de_words = [de_det] if de_det else []
    en_words = [en_det] if en_det else []
    if adj:
        de_words.append(adjective(adj[0], endings[case][slot]))
        en_words.append(adj[1])
    de_words.append(de_noun)
    en_noun = n.en_pl if plural else n.en
    if kind == "poss" and n.de in SPOUSES:  # meine Frau: my wife
        en_noun = SPOUSES[n.de][plural]
    en_words.append(en_noun)
    if en_words[0] == "a":
        en_words[0] = a_or_an(en_words[1])
    return " ".join(de_words), " ".join(en_words)


# ------------------------------------------------------------------------ sentences


class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def maybe(self, p: float) -> bool:
        return self.rng.random() < p

    def adj(self, n: Noun, p: float):
        if not self.maybe(p):
            return None
        tag = next(t for t in ("person", "food", "drink", "read", "animal", "thing") if t in n.tags)
        return self.rng.choice(ADJECTIVES[tag])

    def phrase(self, n: Noun, case: str, kinds=("def", "indef", "poss"), p_plural=0.3, p_adj=0.3):
        """(german, english, person) for a noun phrase; mass nouns take no article or the."""
        plural = n.de_pl is not None and self.maybe(p_plural)
        kind = self.rng.choice(kinds)
        de, en = noun_phrase(self.rng, n, case, kind, plural, self.adj(n, p_adj))
        return de, en, 5 if plural else 2

    def subject(self, p_pronoun=0.45):
        if self.maybe(p_pronoun):
            de, person, en = self.rng.choice(PRONOUNS)
            return de, en, person
        return self.phrase(self.rng.choice(PEOPLE), "nom")

    def verb_and_object(self, case="acc", kinds=("def", "indef", "poss")):
        v = self.rng.choice(VERBS)
        candidates = [n for n in OBJECTS + PEOPLE if n.tags & v.objects]
        de, en, _ = self.phrase(self.rng.choice(candidates), case, kinds)
        return v, de, en

    def sentence(self) -> tuple[str, str]:
        templates = [
            (self.simple, 18), (self.fronted_time, 10), (self.time_inside, 8),
            (self.frequency, 6), (self.negation, 8), (self.kein, 6), (self.question, 9),
            (self.modal, 10), (self.perfect, 10), (self.dass, 6), (self.weil, 5),
            (self.predicate, 6), (self.coordination, 5), (self.there_is, 5),
        ]  # fmt: skip
        fn = self.rng.choices([t for t, _ in templates], [w for _, w in templates])[0]
        de, en, end = fn()
        return _finish(de, end), _finish(en, end)

    # Each template returns (german, english, final punctuation).

    def _place(self, p):
        return self.rng.choice(PLACES) if self.maybe(p) else ("", "")

    def simple(self):
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        with_de, with_en = ("", "")
        if self.maybe(0.15):
            c_de, c_en, _ = self.phrase(self.rng.choice(PEOPLE), "dat", ("def", "poss"), p_adj=0)
            with_de, with_en = f"mit {c_de}", f"with {c_en}"
        p_de, p_en = self._place(0.4)
        return (
            _join(s_de, v.forms[person], o_de, with_de, p_de),
            _join(s_en, _en_present(v, person), o_en, with_en, p_en),
            ".",
        )

    def fronted_time(self):
        t_de, t_en = self.rng.choice(TIMES_NOW)
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        p_de, p_en = self._place(0.35)
        return (
            _join(t_de, v.forms[person], s_de, o_de, p_de),
            _join(t_en, s_en, _en_present(v, person), o_en, p_en),
            ".",
        )

    def time_inside(self):
        t_de, t_en = self.rng.choice(TIMES_NOW)
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        p_de, p_en = self._place(0.5)
        return (
            _join(s_de, v.forms[person], t_de, o_de, p_de),
            _join(s_en, _en_present(v, person), o_en, p_en, t_en),
            ".",
        )

    def frequency(self):
        f_de, f_en = self.rng.choice(FREQUENCY)
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        return (
            _join(s_de, v.forms[person], f_de, o_de),
            _join(s_en, f_en, _en_present(v, person), o_en),
            ".",
        )

    def negation(self):
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object(kinds=("def", "poss"))
        return (
            _join(s_de, v.forms[person], o_de, "nicht"),
            _join(s_en, _do(person), "not", v.en[0], o_en),
            ".",
        )

    def kein(self):
        s_de, s_en, person = self.subject()
        v = self.rng.choice([v for v in VERBS if v.objects & {"food", "drink", "read", "thing"}])
        n = self.rng.choice([n for n in OBJECTS if n.tags & v.objects])
        plural = n.de_pl is not None and self.maybe(0.3)
        o_de, o_en = noun_phrase(self.rng, n, "acc", "kein", plural, self.adj(n, 0.2))
        o_en = ("any " + o_en) if plural or n.de_pl is None else _with_article(o_en)
        return (
            _join(s_de, v.forms[person], o_de),
            _join(s_en, _do(person), "not", v.en[0], o_en),
            ".",
        )

    def question(self):
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        p_de, p_en = self._place(0.3)
        return (
            _join(v.forms[person], s_de, o_de, p_de),
            _join(_do(person), s_en, v.en[0], o_en, p_en),
            "?",
        )

    def modal(self):
        forms, en3, en_other = self.rng.choice(MODALS)
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        p_de, p_en = self._place(0.35)
        return (
            _join(s_de, forms[person], o_de, p_de, v.infinitive),
            _join(s_en, en3 if person == 2 else en_other, v.en[0], o_en, p_en),
            ".",
        )

    def perfect(self):
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        p_de, p_en = self._place(0.3)
        haben = HABEN[person]
        if self.maybe(0.5):
            t_de, t_en = self.rng.choice(TIMES_PAST)
            return (
                _join(t_de, haben, s_de, o_de, p_de, v.participle),
                _join(t_en, s_en, v.en[2], o_en, p_en),
                ".",
            )
        return (
            _join(s_de, haben, o_de, p_de, v.participle),
            _join(s_en, "has" if person == 2 else "have", v.en[3], o_en, p_en),
            ".",
        )

    def dass(self):
        m_de, m_en = self.rng.choice(OPINIONS)
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        p_de, p_en = self._place(0.3)
        return (
            f"{m_de}, dass " + _join(s_de, o_de, p_de, v.forms[person]),
            f"{m_en} that " + _join(s_en, _en_present(v, person), o_en, p_en),
            ".",
        )

    def weil(self):
        s_de, s_en, person = self.subject(p_pronoun=0.3)
        v, o_de, o_en = self.verb_and_object()
        r_de, r_person, r_en = self.rng.choice(PRONOUNS)
        a_de, a_en = self.rng.choice(ADJECTIVES["person"])
        return (
            _join(s_de, v.forms[person], o_de) + f", weil {r_de} {a_de} {SEIN[r_person]}",
            _join(s_en, _en_present(v, person), o_en, "because", r_en, BE[r_person], a_en),
            ".",
        )

    def predicate(self):
        if self.maybe(0.4):
            s_de, s_en, person = self.subject()
            a_de, a_en = self.rng.choice(ADJECTIVES["person"])
        else:
            n = self.rng.choice(OBJECTS)
            s_de, s_en, person = self.phrase(n, "nom", ("def", "poss"), p_adj=0)
            a_de, a_en = self.adj(n, 1.0)
        very = self.maybe(0.3)
        return (
            _join(s_de, SEIN[person], "sehr" if very else "", a_de),
            _join(s_en, BE[person], "very" if very else "", a_en),
            ".",
        )

    def coordination(self):
        (de1, en1), (de2, en2) = self._clause(), self._clause()
        conj_de, conj_en = self.rng.choice([("und", "and"), ("aber", "but")])
        comma = "," if conj_de == "aber" else ""
        return f"{de1}{comma} {conj_de} {de2}", f"{en1}{comma} {conj_en} {en2}", "."

    def _clause(self) -> tuple[str, str]:
        s_de, s_en, person = self.subject()
        v, o_de, o_en = self.verb_and_object()
        return _join(s_de, v.forms[person], o_de), _join(s_en, _en_present(v, person), o_en)

    def there_is(self):
        n = self.rng.choice([n for n in OBJECTS if "animal" in n.tags or "thing" in n.tags])
        p_de, p_en = self.rng.choice(PLACES)
        if self.maybe(0.5):
            o_de, o_en = noun_phrase(self.rng, n, "acc", "number", True, self.adj(n, 0.3))
            return _join(p_de, "gibt es", o_de), _join("there are", o_en, p_en), "."
        o_de, o_en = noun_phrase(self.rng, n, "acc", "indef", False, self.adj(n, 0.3))
        return _join(p_de, "gibt es", o_de), _join("there is", o_en, p_en), "."


def _with_article(en: str) -> str:
    return f"{a_or_an(en)} {en}"


def _en_present(v: Verb, person: int) -> str:
    return v.en[1] if person == 2 else v.en[0]


def _do(person: int) -> str:
    return "does" if person == 2 else "do"


def _join(*words: str) -> str:
    return " ".join(w for w in words if w)


def _finish(text: str, end: str) -> str:
    return text[0].upper() + text[1:] + end


# ------------------------------------------------------------------------ output


def generate(seed: int, sizes: dict[str, int]) -> dict[str, list[tuple[str, str]]]:
    gen = Generator(seed)
    seen_de: set[str] = set()
    train_en: set[str] = set()
    out: dict[str, list[tuple[str, str]]] = {}
    for split, size in sizes.items():
        pairs: list[tuple[str, str]] = []
        split_en: set[str] = set()
        while len(pairs) < size:
            de, en = gen.sentence()
            if de in seen_de or (split != "train" and (en in train_en or en in split_en)):
                continue
            seen_de.add(de)
            split_en.add(en)
            pairs.append((de, en))
        if split == "train":
            train_en = split_en
        out[split] = pairs
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python scripts/make_sample_corpus.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--train", type=_pairs, default=3000)
    parser.add_argument("--validation", type=_pairs, default=200)
    parser.add_argument("--test", type=_pairs, default=200)
    parser.add_argument(
        "--out", type=Path, required=True, help=f"a new or empty folder (the committed one: {OUT})"
    )
    args = parser.parse_args(argv)
    sizes = {"train": args.train, "validation": args.validation, "test": args.test}
    try:
        io.check_output_folder(args.out, "--out")  # never mixed into another corpus
        for split, pairs in generate(args.seed, sizes).items():
            for i, lang in enumerate(("de", "en")):
                text = "".join(pair[i] + "\n" for pair in pairs)
                io.write(args.out / f"{split}.{lang}", text, "sample corpus", key="--out")
            print(f"{split}: {len(pairs)} pairs")
    except UserError as err:
        parser.exit(EXIT_USER_ERROR, f"error: {err}\n")


def _pairs(text: str) -> int:
    """An argparse ``type``: a split's size, at least one pair (an empty split is no corpus)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of pairs >= 1")
    return int(text)


if __name__ == "__main__":
    main()
