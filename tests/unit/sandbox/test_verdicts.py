"""The verdicts of ordinary programs and what they say: pass, fail with what f returned, error with the
program's line, syntax, answer types, captured output; equality or truthiness faked by a program fails;
correct programs that leave things untidy still pass."""

from __future__ import annotations

import pytest
from sandbox_support import (
    ORDINARY,
    ORDINARY_PROGRAMS,
    assert_nothing_outlives,
    check_ordinary,
    contained,
    program,
)

from codeplay_lightning.execution import Program

# ---------------------------------------------------------------- basics


def test_ordinary_programs(mixed):
    check_ordinary(mixed.verify(ORDINARY_PROGRAMS))
    assert_nothing_outlives()


def test_pass_is_the_only_passed_verdict(mixed):
    verdicts = mixed.verify(ORDINARY_PROGRAMS)
    assert [v.passed for v in verdicts] == [status == "pass" for _, status, _ in ORDINARY]
    assert all(v.status in ("pass", "fail", "error", "timeout", "memory", "syntax") for v in verdicts)
    assert all(0 <= v.seconds < 2.0 for v in verdicts)


def test_fail_detail_shows_what_f_returned(mixed):
    verdicts = mixed.verify(
        [
            program("def f(x: int):\n    return x + 1", "def g():\n    return 41"),
            program("def f(x: int):\n    return None", "def g():\n    return 1"),
            program("def f(x: str):\n    return 'abc' * 2", "def g():\n    return 'x'"),
        ]
    )
    assert [v.status for v in verdicts] == ["fail"] * 3
    assert "f returned 42" in verdicts[0].detail
    assert (verdicts[0].answer, verdicts[0].returned) == ("41", "42")  # the same, as fields
    assert (verdicts[2].answer, verdicts[2].returned) == ("'x'", "'abcabc'")
    assert "f returned None" in verdicts[1].detail
    assert "abcabc" in verdicts[2].detail


def test_error_detail_has_type_message_and_program_line(mixed):
    (verdict,) = mixed.verify(
        [
            program(
                "def f(x: int):\n    return True",
                """
        def g():
            values = [1, 2]
            return values[5]
        """,
            )
        ]
    )
    assert verdict.status == "error"
    assert "IndexError" in verdict.detail and "list index out of range" in verdict.detail
    assert 'File "<g>", line 3, in g' in verdict.detail and "return values[5]" in verdict.detail
    assert len(verdict.detail.splitlines()) < 15  # short: no frames of the sandbox itself
    assert "warden" not in verdict.detail and "programs.py" not in verdict.detail

    (verdict,) = mixed.verify(
        [
            program(
                """
        def f(x: int):
            helper = {"a": 1}
            return helper[x]
        """,
                "def g():\n    return 7",
            )
        ]
    )
    assert verdict.status == "error"
    assert "KeyError: 7" in verdict.detail and 'File "<f>", line 3, in f' in verdict.detail


@pytest.mark.parametrize(
    "f, g, fragment",
    [
        ("def f(x) return x", "def g():\n    return 1", "f:"),
        ("def f(x):\n    return x", "def g(:\n    return 1", "g:"),
        ("def f(x):\n    return x", "def h():\n    return 1", "no function g"),
        ("def f(x):\n    return x", "", "no function g"),
        ("def f(x):\n    return x", "g = 5", "no function g"),
        ("def f(x):\n    return x", "def g():\n    return '\0'\x00", "g:"),
        ("def f(x):\n    return x", "def g():\n    return " + "(" * 500 + ")" * 500, "g:"),
        ("x = 1", "def g():\n    return 1", "no function f"),
    ],
)
def test_syntax(mixed, f, g, fragment):
    (verdict,) = mixed.verify([Program(f, g)])
    assert verdict.status == "syntax", verdict
    assert fragment in verdict.detail


@pytest.mark.parametrize(
    "f, g, ans_type, status",
    [
        ("def f(x):\n    return True", "def g():\n    return True", "int", "fail"),  # bool is not int
        ("def f(x):\n    return True", "def g():\n    return 1", "bool", "fail"),
        ("def f(x):\n    return True", "def g():\n    return True", "bool", "pass"),
        ("def f(x):\n    return True", "def g():\n    class I(int):\n        pass\n    return I(3)", "int", "fail"),
        ("def f(x):\n    return True", "def g():\n    class S(str):\n        pass\n    return S('a')", "str", "fail"),
        ("def f(x):\n    return True", "def g():\n    return 1", "float", "fail"),
        ("def f(x):\n    return True", "def g():\n    return 1.0", "int", "fail"),
        ("def f(x):\n    return True", "def g():\n    return 1.5", "float", "pass"),
        ("def f(x):\n    return x == [[1, 2], [3]]", "def g():\n    return [[1, 2], [3]]", "List[List[int]]", "pass"),
        ("def f(x):\n    return True", "def g():\n    return [[1, 2], [3.0]]", "List[List[int]]", "fail"),
        ("def f(x):\n    return True", "def g():\n    return [[1], 2]", "List[List[int]]", "fail"),
        ("def f(x):\n    return True", "def g():\n    return [(1, 2)]", "List[List[int]]", "fail"),
        ("def f(x):\n    return True", "def g():\n    return [[True]]", "List[List[int]]", "fail"),
        ("def f(x):\n    return True", "def g():\n    return []", "List[List[int]]", "pass"),
        (
            "def f(x):\n    return True",
            "def g():\n    class L(list):\n        pass\n    return L([1])",
            "List[int]",
            "fail",
        ),
        ("def f(x):\n    return True", "def g():\n    return [1, 2]", "list[int]", "pass"),
        # ints cross as hex: huge and negative ones arrive intact
        ("def f(x):\n    return x == 3 ** 200000", "def g():\n    return 3 ** 200000", "int", "pass"),
        (
            "def f(x):\n    return x == [[-5, 0], [7 ** 99]]",
            "def g():\n    return [[-5, 0], [7 ** 99]]",
            "List[List[int]]",
            "pass",
        ),
        ("def f(x):\n    return True", "def g():\n    return ['a', 'b']", "List[str]", "pass"),
        # the type comes from f's first annotation when ans_type is None
        ("def f(x: str):\n    return True", "def g():\n    return 5", None, "fail"),
        ("def f(x: str):\n    return True", "def g():\n    return '5'", None, "pass"),
        ("def f(x: List[int], n=3):\n    return True", "def g():\n    return [1.0]", None, "fail"),
        # ans_type wins over the annotation
        ("def f(x: str):\n    return True", "def g():\n    return 5", "int", "pass"),
        # no type at all: any JSON value
        ("def f(x):\n    return x == {'a': [1, None]}", "def g():\n    return {'a': [1, None]}", None, "pass"),
        ("def f(x):\n    return x == {1, 2}", "def g():\n    return {2, 1}", None, "error"),  # no set in JSON
        ("def f(x):\n    return True", "def g():\n    return (1, 2)", None, "error"),  # nor a tuple
        ("def f(x):\n    return True", "def g():\n    x = []\n    x.append(x)\n    return x", None, "pass"),  # kept
    ],
)
def test_answer_types(mixed, f, g, ans_type, status):
    (verdict,) = mixed.verify([Program(f, g, ans_type)])
    assert verdict.status == status, verdict
    if status == "fail":
        assert "is not of type" in verdict.detail
    if status == "error":
        assert "cannot be judged" in verdict.detail or "nests deeper" in verdict.detail


@pytest.mark.parametrize(
    "f, ans_type, named",
    [
        ("def f(x):\n    return True", "Dict[str, int]", "Dict[str, int]"),
        ("def f(x: dict):\n    return True", None, "dict"),
        ("def f(x: 'Tuple[int, int]'):\n    return True", None, "Tuple[int, int]"),
        ("def f(x):\n    return True", "List[List[complex]]", "complex"),
    ],
)
def test_unsupported_answer_type_is_an_error_naming_it(mixed, f, ans_type, named):
    (verdict,) = mixed.verify([Program(f, "def g():\n    return 1", ans_type)])
    assert verdict.status == "error"
    assert "unsupported answer type" in verdict.detail and named in verdict.detail


def test_output_is_captured(mixed):
    passing, failing, erring = mixed.verify(
        [
            program(
                "def f(x: int):\n    print('f saw', x)\n    return x == 3",
                "import sys\ndef g():\n    print('hello from g')\n    sys.stderr.write('warning from g\\n')\n"
                "    return 3",
            ),
            program("def f(x: int):\n    print('checking')\n    return False", "def g():\n    return 3"),
            program(
                "def f(x: int):\n    return True", "def g():\n    print('about to fail')\n    raise ValueError('nope')"
            ),
        ]
    )
    assert passing.status == "pass"
    assert passing.output == "hello from g\nwarning from g\nf saw 3\n"
    assert failing.status == "fail" and failing.output == "checking\n"
    assert erring.status == "error" and erring.output == "about to fail\n" and "ValueError: nope" in erring.detail
    # output does not leak into the next program
    (quiet,) = mixed.verify([ORDINARY_PROGRAMS[0]])
    assert quiet.output == ""


# ---------------------------------------------------------------- faked equality and truthiness


@pytest.mark.parametrize(
    "f, g",
    [
        (
            "def f(x: int):\n    return x == 5",
            "def g():\n    class Eq:\n        def __eq__(self, other):\n            return True\n    return Eq()",
        ),
        (
            "def f(x: int):\n    return x == 5",
            "def g():\n    class I(int):\n        def __eq__(self, other):\n            return True\n    return I(4)",
        ),
        (
            "def f(x: List[int]):\n    return x == [5]",
            "def g():\n    class L(list):\n        def __eq__(self, other):\n"
            "            return True\n    return L([4])",
        ),
        (
            "def f(x: int):\n    return x == 5",
            "def g():\n    class Liar:\n        __class__ = property(lambda self: int)\n"
            "        def __eq__(self, other):\n"
            "            return True\n    return Liar()",
        ),
        ("def f(x: int):\n    return 1", "def g():\n    return 5"),
        ("def f(x: int):\n    return 'yes'", "def g():\n    return 5"),
        ("def f(x: int):\n    return [True]", "def g():\n    return 5"),
        (
            "def f(x: int):\n    class T:\n        def __bool__(self):\n            return True\n"
            "        def __eq__(self, o):\n            return True\n    return T()",
            "def g():\n    return 5",
        ),
        ("import numbers\ndef f(x: int):\n    return 1.0", "def g():\n    return 5"),
    ],
    ids=[
        "always_equal",
        "int_subclass",
        "list_subclass",
        "lies_about_class",
        "f_returns_1",
        "f_returns_str",
        "f_returns_list",
        "f_returns_truthy_object",
        "f_returns_1.0",
    ],
)
def test_faked_equality_and_truthiness_fail(mixed, f, g):
    (verdict,) = contained(mixed, program(f, g))
    assert verdict.status == "fail", verdict


# ---------------------------------------------------------------- correct programs stay correct


@pytest.mark.parametrize(
    "g",
    [
        "def g():\n    handle = open('note.txt', 'w')\n    handle.write('x')\n    return 5",
        "import threading\ndef g():\n    threading.Thread(target=lambda: None).start()\n    return 5",
        "def g():\n    async def later():\n        return 1\n    later()\n    return 5",
        "import warnings\ndef g():\n    warnings.warn('careful')\n    return 5",
    ],
    ids=["unclosed_file", "unjoined_thread", "unawaited_coroutine", "warning"],
)
def test_untidy_correct_programs_pass(mixed, g):
    (verdict,) = mixed.verify([program("def f(x: int):\n    return x == 5", g)])
    assert verdict.status == "pass", verdict


def test_annotations_are_evaluated_as_in_p3(mixed):
    (verdict,) = mixed.verify(
        [
            program(
                "def f(x: int) -> bool:\n    return f.__annotations__['x'] is int and x == 1",
                "def g() -> int:\n    return 1 if g.__annotations__['return'] is int else 0",
            )
        ]
    )
    assert verdict.status == "pass", verdict


# ---------------------------------------------------------------- answers as P3's judge gives them to f


@pytest.mark.parametrize(
    "f, g",
    [
        # a list held twice: f changes it through one place and sees it through the other
        (
            "def f(x: List[List[int]]):\n    x[0].append(9)\n    return x[1] == [1, 9]",
            "def g():\n    part = [1]\n    return [part, part]",
        ),
        # a list that holds itself
        ("def f(x):\n    return x[0] is x", "def g():\n    loop = []\n    loop.append(loop)\n    return loop"),
        # a dict held under two keys
        (
            "def f(x):\n    return x['a'] is x['b']",
            "def g():\n    shared = {'n': 1}\n    return {'a': shared, 'b': shared}",
        ),
        # an int-typed answer whose lists are shared travels as hex and comes back shared
        (
            "def f(x: List[List[int]]):\n    return x[0] is x[1] and x[0] == [2**100, 3]",
            "def g():\n    part = [2**100, 3]\n    return [part, part]",
        ),
    ],
    ids=["list_twice", "list_in_itself", "dict_twice", "int_lists_shared"],
)
def test_the_answer_keeps_its_lists_and_dicts_shared_as_in_p3(mixed, f, g):
    """P3's judge calls f on g's very object; here the answer travels as data between two processes, and which of
    its lists and dicts are one and the same travels with it."""
    (verdict,) = mixed.verify([program(f, g)])
    assert verdict.status == "pass", verdict


def test_equal_immutable_values_are_not_one_object_as_they_may_be_in_p3(mixed):
    """The one difference from P3's judge (docs/sandbox.md): the identity of equal immutable values is not kept.
    Here g returns one large int object twice; P3's judge would pass f, which asks whether they are one object."""
    (verdict,) = mixed.verify(
        [program("def f(x: List[int]):\n    return x[0] is x[1]", "def g():\n    big = 2**100\n    return [big, big]")]
    )
    assert verdict.status == "fail", verdict


@pytest.mark.parametrize(
    ("f", "g", "answer", "detail"),
    [
        (
            "def f(x: int):\n    return x > 10 ** 599_999",
            "def g():\n    return 10 ** 600_000",
            "<int of 1993157 bits>",
            "",
        ),
        (
            "def f(x: List[int]):\n    return x[0] % 7 == 3",
            "def g():\n    return [7 ** 700_000 + 3, 5]",
            "[<int of 1965149 bits>, 5]",
            "",
        ),
        (
            "def f(x: int):\n    return x * 10 ** 600_000",
            "def g():\n    return 1",
            "1",
            "f returned <int of 1993157 bits> for x = 1",
        ),
    ],
    ids=["int", "list_of_ints", "returned"],
)
def test_a_huge_int_is_judged_within_its_time_as_in_p3(mixed, f, g, answer, detail):
    """P3 judges an answer of 10**600_000 in a fraction of a second: it travels as hex and is shown by its size
    (its decimal digits would take seconds to find)."""
    (verdict,) = mixed.verify([program(f, g)])
    assert verdict.status == ("fail" if detail else "pass") and verdict.answer == answer, verdict
    assert verdict.detail == detail and verdict.seconds < 1.0, verdict
