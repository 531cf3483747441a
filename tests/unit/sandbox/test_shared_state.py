"""Interpreter state a program changes (builtins, modules, finalizers, audit hooks, f's namespace): it
dies with the program's process, and never reaches the f that judges it or a later program."""

from __future__ import annotations

import decimal

import pytest
from sandbox_support import (
    contained,
    program,
    wrong,
)

# ---------------------------------------------------------------- shared interpreter state


TAMPERING = {
    "builtins_len": "import builtins\ndef g():\n    builtins.len = lambda *args: 4\n    return 4",
    "builtins_sorted_deleted": "import builtins\ndef g():\n    del builtins.sorted\n    return 4",
    "builtins_via_dunder": "def g():\n    __builtins__.len = lambda *args: 4\n    return 4",
    "math_sqrt": "import math\ndef g():\n    math.sqrt = lambda x: 3.0\n    return 4",
    "counter_method": "import collections\ndef g():\n"
    "    collections.Counter.most_common = lambda self, n=None: [('a', 2)]\n    return 4",
    "sys_modules_math": """
        import sys, types
        def g():
            fake = types.ModuleType("math")
            fake.sqrt = lambda x: 3.0
            sys.modules["math"] = fake
            return 4
        """,
    "typing_list": "import typing\ndef g():\n    typing.List = None\n    return 4",
    "module_dict": "import math\ndef g():\n    vars(math)['sqrt'] = abs\n    return 4",
}


@pytest.mark.parametrize("g", TAMPERING.values(), ids=TAMPERING.keys())
def test_tampering_with_shared_state(solo, g):
    """What g changes in its process dies with it: its answer is wrong, or it broke its own runner."""
    (verdict,) = contained(solo, wrong(g))
    assert verdict.status in ("fail", "error"), verdict


def test_tampering_with_shared_state_in_f(solo):
    """f may do as it likes in its own judge: it decides its own puzzle only."""
    (verdict,) = contained(
        solo,
        program(
            "import builtins\ndef f(x):\n    builtins.len = lambda *a: 4\n    return True", "def g():\n    return 1"
        ),
    )
    assert verdict.status in ("pass", "error"), verdict


def test_tampering_does_not_reach_f(solo):
    (verdict,) = contained(
        solo,
        program(
            "def f(x: List[int]):\n    return len(x) == 4",
            """
        import builtins
        def g():
            builtins.len = lambda *args: 4
            return [1]
        """,
        ),
    )
    assert verdict.status in ("fail", "error"), verdict


def test_legitimate_state_changes_are_undone(solo):
    """Changes a program may make on purpose: undone quietly, not held against it."""
    (verdict,) = contained(
        solo,
        program(
            "def f(x):\n    return x == 4",
            """
        import os, sys, random, signal, decimal, gc
        def g():
            sys.setrecursionlimit(100)
            random.seed(123)
            decimal.getcontext().prec = 3
            os.environ["SOMETHING"] = "1"
            sys.path.insert(0, "/nonexistent")
            signal.signal(signal.SIGALRM, lambda *a: None)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            gc.disable()
            import colorsys  # a new import is forgotten, not an error
            return 4
        """,
        ),
    )
    assert verdict.status == "pass", verdict
    third = str(decimal.Context().divide(1, 3))  # the default context, as a fresh program gets it
    (verdict,) = solo.verify(
        [
            program(
                f"def f(x: List[str]):\n    return x == [{third!r}, '', 'ok']",
                """
        import decimal, os, sys, time
        def g():
            def deep(n):
                return n if n == 0 else deep(n - 1)
            deep(500)
            time.sleep(0.1)  # the alarm set by the last program must not fire here
            return [str(decimal.Decimal(1) / decimal.Decimal(3)), os.environ.get("SOMETHING", ""),
                    "ok" if "/nonexistent" not in sys.path else "path"]
        """,
            )
        ]
    )
    assert verdict.status == "pass", verdict


PATCH_SQRT = "import math; math.sqrt = lambda x: 3.0"  # flips two ordinary programs


@pytest.mark.parametrize(
    "g",
    [
        f"""
    def g():
        class Bomb:
            def __del__(self):
                {PATCH_SQRT}
        bomb = Bomb()  # kept alive by the exception's traceback until the worker lets go of it
        raise ValueError("boom")
    """,
        f"""
    def g():
        class Bomb:
            def __del__(self):
                {PATCH_SQRT}
        bomb = Bomb()
        bomb.cycle = bomb  # finalized at the worker's garbage collection
        return 4
    """,
        f"""
    import weakref
    def g():
        class Node:
            pass
        node = Node()
        node.cycle = node
        def patch():
            {PATCH_SQRT}
        weakref.finalize(node, patch)
        return 4
    """,
        f"""
    def g():
        class Sneaky(Exception):
            def __str__(self):  # runs when the worker describes the error
                {PATCH_SQRT}
                return "sneaky"
        raise Sneaky()
    """,
        f"""
    def g():
        class Phoenix:
            def __del__(self):  # each collection leaves another one behind
                {PATCH_SQRT}
                again = Phoenix()
                again.cycle = again
        first = Phoenix()
        first.cycle = first
        return 4
    """,
        f"""
    def g():
        class Egg:
            def __init__(self, hatch):
                self.hatch, self.cycle = hatch, self
            def __del__(self):  # patches only on the second generation: after any single collection
                if self.hatch:
                    {PATCH_SQRT}
                else:
                    Egg(True)
        Egg(False)
        return 4
    """,
    ],
    ids=[
        "finalizer_in_traceback",
        "finalizer_in_cycle",
        "weakref_finalize",
        "exception_str",
        "resurrecting_finalizer",
        "second_generation_finalizer",
    ],
)
def test_program_code_running_after_the_program(solo, g):
    """Program code can run after the program returned: finalizers, an exception's __str__."""
    (verdict,) = contained(solo, wrong(g))
    assert verdict.status in ("fail", "error"), verdict


def test_audit_hooks_do_not_outlive_the_program(solo):
    """Audit hooks cannot be removed: one added by a program would run inside every later program."""
    (verdict,) = contained(
        solo,
        wrong("""
        import sys
        def g():
            def hook(event, args):
                if event == "exec":  # the worker defining a later program's f or g
                    namespace = sys._getframe(1).f_locals.get("namespace")
                    if isinstance(namespace, dict):
                        namespace["len"] = lambda x: 4
                        namespace["sorted"] = lambda x: [2, 1]
            sys.addaudithook(hook)
            return 4
        """),
    )
    assert verdict.status in ("fail", "error"), verdict


def test_request_pipe_replaced(solo):
    """A program that swaps the worker's request pipe for /dev/null (no extra fd left open)."""
    (verdict,) = contained(
        solo,
        wrong("""
        import json, os, sys
        def g():
            spare = os.open("/dev/null", os.O_RDONLY)
            os.dup2(spare, json.loads(sys.argv[1])["request_fd"])
            os.close(spare)
            return 4
        """),
    )
    assert verdict.status == "fail", verdict


@pytest.mark.parametrize(
    "g",
    [
        "import sys\ndef g():\n    sys._getframe(1).f_locals['f'].__code__ = (lambda x: True).__code__\n    return 4",
        "import sys\ndef g():\n    sys._getframe(1).f_locals['f'].__globals__['x'] = 5\n    return 4",
        "import gc\ndef g():\n    for obj in gc.get_objects():\n"
        "        if getattr(obj, '__name__', '') == 'f' and callable(obj):\n"
        "            obj.__code__ = (lambda x: True).__code__\n    return 4",
        # the globals every program starts from: changed here, every later program would see it
        "import sys\ndef g():\n    base = sys._getframe(1).f_locals['base']\n"
        "    base['len'] = lambda x: 4\n    base['sorted'] = lambda x: [2, 1]\n    return 4",
    ],
    ids=["rewrites_f_code", "plants_f_global", "finds_f_with_gc", "plants_global_for_all"],
)
def test_g_cannot_reach_f(solo, g):
    """f and g get separate namespaces: g must not be able to rewrite the f that judges it."""
    (verdict,) = contained(solo, program("def f(y):\n    return y == 5 if 'x' not in globals() else x == 5", g))
    assert verdict.status in ("fail", "error"), verdict
