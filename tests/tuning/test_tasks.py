"""The task check's items: generated the same everywhere, and scored as a person would."""

from __future__ import annotations

import pytest

from autotune.tuning.quality import tasks
from autotune.tuning.quality.tasks import Item


def test_the_set_is_deterministic_mixed_and_large_enough():
    items = tasks.generate()
    assert len(items) == 200 and items == tasks.generate()
    assert items != tasks.generate(seed=1)
    kinds = {i.kind for i in items}
    assert kinds == set(tasks.KINDS) and len(kinds) >= 6
    assert all(sum(i.kind == k for i in items) == 25 for k in kinds)  # kinds take turns
    assert len({i.prompt for i in items}) > 150  # few repeats
    assert tasks.generate(400)[:200] == items  # a longer set extends the shorter one


def test_every_generated_answer_is_right_and_a_distractor_is_not():
    for item in tasks.generate(400):
        assert tasks.correct(item, item.answer), item
        assert tasks.correct(item, f"{item.answer}.\nSome more text."), item
        if item.kind != "choice":
            assert not tasks.correct(item, "I do not know."), item
        for other in item.distractors:
            assert not tasks.correct(item, other), (item, other)


@pytest.mark.parametrize(("item", "output", "right"), [
    (Item("add", "", "8"), "5 + 3 = 8", True),
    (Item("add", "", "8"), "5 + 3 = 9. So 8 is wrong.", False),  # the first sentence counts
    (Item("extract", "", "Lyon", ("52", "cook")), "The city in this record is Lyon.", True),
    (Item("extract", "", "52", ("Lyon", "cook")), "name: x, city: Lyon, age: 52", False),
    (Item("choice", "", "A"), "A) yellow\n\nThe correct answer is D) truck.", True),
    (Item("choice", "", "C"), "A) banana", False),
    (Item("first", "", "stone", ("lamp",)), 'The first word of this list is "stone."', True),
    (Item("first", "", "stone", ("lamp",)), "The list is: stone, lamp", False),
    (Item("copy", "", "red, lamp"), "The list is: red, lamp.", True),
    (Item("copy", "", "red, lamp"), "red, lamp, cloud", False),
    (Item("capital", "", "Buenos Aires"), "The capital of Argentina is Buenos Aires.", True),
    (Item("capital", "", "Paris"), "Paris is the capital of France.", True),
    (Item("plural", "", "geese"), 'The plural of "goose" is "goosees."', False),
    (Item("opposite", "", "cold"), 'The opposite of "hot" is "cold"', True),
])
def test_answers_are_read_from_the_first_sentence(item, output, right):
    assert tasks.correct(item, output) is right
