"""The guardrail's task check: short questions whose answers can be checked exactly.

Log-prob drift tells that a configuration changed the model's answers, not whether they got
worse. This set asks what users ask of a served model in miniature (pull a field out of a
record, a sum, a comparison, copy or pick from a list, find a word) and checks each greedy
answer exactly, so accuracy and its paired difference against the reference read in points.
It is generated from a seed (no file, no network), so every study asks the same questions;
kinds are mixed so that a small real model gets some right and some wrong.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

NAMES = ("Maria", "Kenji", "Amara", "Lukas", "Priya", "Omar", "Elena", "Tariq", "Sofia",
         "Daniel", "Mei", "Jonas", "Aisha", "Pedro", "Ingrid", "Ravi", "Chloe", "Yusuf")
CITIES = ("Lyon", "Osaka", "Nairobi", "Leipzig", "Pune", "Cairo", "Porto", "Lima", "Oslo",
          "Quito", "Hanoi", "Dublin", "Perth", "Tunis", "Krakow", "Bergen", "Seville")
JOBS = ("baker", "nurse", "pilot", "farmer", "lawyer", "painter", "chemist", "teacher",
        "plumber", "dentist", "tailor", "miner", "sailor", "banker", "cook", "judge")
WORDS = ("apple", "river", "stone", "cloud", "lamp", "horse", "paper", "green", "window",
         "silver", "garden", "bread", "candle", "mirror", "forest", "ticket", "violin",
         "pepper", "rocket", "island", "button", "marble", "saddle", "tunnel")
GROUPS = {
    "an animal": ("horse", "tiger", "rabbit", "eagle", "beaver", "donkey"),
    "a fruit": ("banana", "kiwi", "mango", "pear", "grape", "papaya"),
    "a color": ("purple", "scarlet", "yellow", "crimson", "violet", "turquoise"),
    "a tool": ("hammer", "wrench", "shovel", "chisel", "pliers", "saw"),
    "a vehicle": ("truck", "bicycle", "tractor", "canoe", "scooter", "tram"),
}
CAPITALS = (("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Germany", "Berlin"), ("Egypt", "Cairo"), ("Russia", "Moscow"),
            ("China", "Beijing"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
            ("Norway", "Oslo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Cuba", "Havana"),
            ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Ireland", "Dublin"),
            ("Thailand", "Bangkok"), ("Canada", "Ottawa"), ("Australia", "Canberra"),
            ("Turkey", "Ankara"), ("Brazil", "Brasilia"), ("Sweden", "Stockholm"),
            ("Argentina", "Buenos Aires"), ("Nigeria", "Abuja"), ("Morocco", "Rabat"),
            ("Vietnam", "Hanoi"), ("Switzerland", "Bern"), ("New Zealand", "Wellington"),
            ("Kazakhstan", "Astana"), ("Pakistan", "Islamabad"), ("Tanzania", "Dodoma"),
            ("Mongolia", "Ulaanbaatar"), ("Myanmar", "Naypyidaw"))
OPPOSITES = (("hot", "cold"), ("big", "small"), ("fast", "slow"), ("happy", "sad"),
             ("light", "dark"), ("up", "down"), ("open", "closed"), ("early", "late"),
             ("strong", "weak"), ("rich", "poor"), ("full", "empty"), ("true", "false"),
             ("hard", "soft"), ("wet", "dry"), ("young", "old"), ("win", "lose"),
             ("above", "below"), ("buy", "sell"), ("thick", "thin"), ("loud", "quiet"))
PLURALS = (("cat", "cats"), ("box", "boxes"), ("child", "children"), ("mouse", "mice"),
           ("city", "cities"), ("leaf", "leaves"), ("tooth", "teeth"), ("bus", "buses"),
           ("woman", "women"), ("knife", "knives"), ("goose", "geese"), ("baby", "babies"),
           ("foot", "feet"), ("dish", "dishes"), ("wolf", "wolves"), ("person", "people"),
           ("sheep", "sheep"), ("story", "stories"), ("man", "men"), ("glass", "glasses"))
LETTERS = "ABCD"


@dataclass(frozen=True)
class Item:
    """One question: its kind, the prompt as a user would type it, the right answer, and
    the wrong answers the prompt itself offers (an answer naming one is not an answer)."""

    kind: str
    prompt: str
    answer: str
    distractors: tuple[str, ...] = ()


def _extract(rng: random.Random) -> Item:
    name, city, job, age = rng.choice(NAMES), rng.choice(CITIES), rng.choice(JOBS), \
        rng.randint(19, 88)
    asked = rng.choice(["city", "job", "age"])
    record = f"name: {name}\ncity: {city}\nage: {age}\njob: {job}"
    values = {"name": name, "city": city, "job": job, "age": str(age)}
    return Item("extract", f"Here is a record:\n{record}\nWhat is the {asked} in this record? "
                "Answer with the value only.", values.pop(asked), tuple(values.values()))


def _add(rng: random.Random) -> Item:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return Item("add", f"What is {a} + {b}? Answer with the number only.", str(a + b))


def _choice(rng: random.Random) -> Item:
    group = rng.choice(sorted(GROUPS))
    right = rng.choice(GROUPS[group])
    others = [w for g, ws in sorted(GROUPS.items()) if g != group for w in ws]
    options = rng.sample(others, 3) + [right]
    rng.shuffle(options)
    lines = "\n".join(f"{LETTERS[i]}) {w}" for i, w in enumerate(options))
    return Item("choice", f"Which of these is {group}?\n{lines}\nAnswer with the letter only.",
                LETTERS[options.index(right)])


def _capital(rng: random.Random) -> Item:
    country, city = rng.choice(CAPITALS)
    return Item("capital", f"What is the capital of {country}? Answer with the city only.",
                city)


def _opposite(rng: random.Random) -> Item:
    word, other = rng.choice(OPPOSITES)
    return Item("opposite", f'What is the opposite of the word "{word}"? Answer with one '
                "word.", other)


def _plural(rng: random.Random) -> Item:
    word, plural = rng.choice(PLURALS)
    return Item("plural", f'What is the plural of "{word}"? Answer with one word.', plural)


def _first(rng: random.Random) -> Item:
    words = rng.sample(WORDS, rng.randint(4, 6))
    return Item("first", f"What is the first word of this list: {', '.join(words)}? "
                "Answer with the word only.", words[0], tuple(words[1:]))


def _copy(rng: random.Random) -> Item:
    words = rng.sample(WORDS, rng.randint(3, 5))
    return Item("copy", "Copy this list of words exactly: " + ", ".join(words),
                ", ".join(words))


KINDS: dict[str, Callable[[random.Random], Item]] = {
    "extract": _extract, "add": _add, "choice": _choice, "capital": _capital,
    "opposite": _opposite, "plural": _plural, "first": _first, "copy": _copy,
}


def generate(n: int = 200, seed: int = 0) -> list[Item]:
    """`n` items, the kinds taking turns, the same for the same (n, seed) everywhere."""
    rng = random.Random(seed)
    kinds = list(KINDS.values())
    return [kinds[i % len(kinds)](rng) for i in range(n)]


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s,]", " ", text.lower())).strip()


def _first_sentence(output: str) -> str:
    line = next((ln for ln in output.strip().splitlines() if ln.strip()), "")
    return re.split(r"[.!?](?:\s|$)", line, maxsplit=1)[0]  # "3.5" is not an end


def _has(text: str, phrase: str) -> bool:
    return re.search(rf"\b{re.escape(_normal(phrase))}\b", text) is not None


def correct(item: Item, output: str) -> bool:
    """Whether `output` answers `item`, read from its first sentence as a person would:
    the last number for a number (so "5 + 3 = 8" reads 8), the first option letter for a
    choice ("A) yellow" is A, whatever follows), the whole list for a copy, and for a
    word the answer named without any of the item's distractors ("The city in this
    record is Lyon." and "Lyon." are right; repeating the whole record is not)."""
    said = _first_sentence(output)
    if item.kind == "choice":
        found = re.search(r"\b([A-D])\b", said)
        return found is not None and found.group(1) == item.answer
    if item.kind == "copy":
        return _normal(said.split(":")[-1] if ":" in said else said) == _normal(item.answer)
    if item.answer.isdigit() and not item.distractors:
        numbers = re.findall(r"\d+", said.replace(",", ""))
        return bool(numbers) and numbers[-1] == item.answer
    text = _normal(said)
    return _has(text, item.answer) and not any(_has(text, d) for d in item.distractors)
