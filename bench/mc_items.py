"""200 simple 4-option multiple-choice questions, generated deterministically.

Each item is (context, options, gold index). The context starts with a fixed
instruction and two worked examples, the way few-shot MC evaluations are run.
"""

from __future__ import annotations

import random

INSTRUCTIONS = (
    "The following are multiple choice questions about everyday knowledge. "
    "Answer each question with the correct option.\n\n"
    "Question: Which of these is a fruit?\nAnswer: an apple\n\n"
    "Question: What is two plus two?\nAnswer: four\n\n"
)

_CATEGORIES: dict[str, list[str]] = {
    "an animal": [
        "a dog",
        "a cat",
        "a horse",
        "a rabbit",
        "an elephant",
        "a sparrow",
        "a whale",
        "a frog",
    ],
    "a colour": ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"],
    "a vehicle": [
        "a car",
        "a bicycle",
        "a bus",
        "a train",
        "a boat",
        "a truck",
        "a plane",
        "a tractor",
    ],
    "a musical instrument": [
        "a piano",
        "a violin",
        "a guitar",
        "a drum",
        "a flute",
        "a trumpet",
        "a harp",
        "a cello",
    ],
    "a piece of furniture": [
        "a chair",
        "a table",
        "a sofa",
        "a bed",
        "a wardrobe",
        "a desk",
        "a bench",
        "a shelf",
    ],
    "a vegetable": [
        "a carrot",
        "a potato",
        "an onion",
        "a cabbage",
        "a leek",
        "a turnip",
        "a pea",
        "a radish",
    ],
}
_NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
]
_CAPITALS = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Germany", "Berlin"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Egypt", "Cairo"),
    ("Russia", "Moscow"),
    ("Greece", "Athens"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
    ("Norway", "Oslo"),
    ("Ireland", "Dublin"),
]


def mc_items(n: int = 200, seed: int = 0) -> list[tuple[str, list[str], int]]:
    """`n` items: (context ending in "Answer:", four options each starting with a space, gold index)."""
    rng = random.Random(seed)
    out: list[tuple[str, list[str], int]] = []
    cats = list(_CATEGORIES)
    while len(out) < n:
        kind = len(out) % 3
        if kind == 0:
            cat = rng.choice(cats)
            right = rng.choice(_CATEGORIES[cat])
            wrong_pool = [w for c in cats if c != cat for w in _CATEGORIES[c]]
            q = f"Which of these is {cat}?"
            opts = [right, *rng.sample(wrong_pool, 3)]
        elif kind == 1:
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            q = f"What is {_NUMBERS[a]} plus {_NUMBERS[b]}?"
            right = _NUMBERS[a + b]
            opts = [right, *rng.sample([x for x in _NUMBERS if x != right], 3)]
        else:
            country, right = rng.choice(_CAPITALS)
            q = f"What is the capital of {country}?"
            opts = [right, *rng.sample([c for _, c in _CAPITALS if c != right], 3)]
        rng.shuffle(opts)
        out.append(
            (f"{INSTRUCTIONS}Question: {q}\nAnswer:", [" " + o for o in opts], opts.index(right))
        )
    return out
