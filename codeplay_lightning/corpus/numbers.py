"""Numbers puzzle families."""

from __future__ import annotations

import math
import random

from codeplay_lightning.corpus.family import families_in, family

_PRIMES = [p for p in range(2, 100_000) if all(p % d for d in range(2, math.isqrt(p) + 1))]


def _digit_sum(n: int) -> int:
    return sum(int(d) for d in str(n))


def _divisor_count(n: int) -> int:
    return sum(1 + (d * d != n) for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def _minus(value: float) -> str:
    """`- value` as source, without a double sign."""
    return f"- {value}" if value >= 0 else f"+ {-value}"


def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
    return steps


@family("numbers")
def remainders_in_window(rng: random.Random, grade: int) -> tuple[str, str]:
    # Pairwise coprime moduli: distinct primes, some raised to a power.
    primes = rng.sample([2, 3, 5, 7, 11, 13, 17, 19, 23][: 3 + 2 * grade], grade + 1)
    moduli = [p ** rng.randint(1, 2) if p < 6 else p for p in primes]
    pairs = [(m, rng.randrange(1, m)) for m in moduli]
    lo = rng.randint(1, 10 ** (grade + 1))
    hi = lo + math.prod(moduli)
    f = f"""def f(n: int):
    return {lo} <= n < {hi} and all(n % m == r for m, r in {pairs})"""
    g = f"""def g():
    pairs, lo = {pairs}, {lo}
    n, step = 0, 1
    for m, r in pairs:
        while n % m != r:
            n += step
        step *= m
    return lo + (n - lo) % step"""
    return f, g


@family("numbers")
def semiprime_factors(rng: random.Random, grade: int) -> tuple[str, str]:
    bound = (50, 1_000, 20_000)[grade - 1]
    small = [p for p in _PRIMES if p < bound]
    p, q = sorted(rng.sample(small if grade < 3 else small[len(small) // 20 :], 2))
    f = f"""def f(pq: List[int]):
    return len(pq) == 2 and 1 < pq[0] < pq[1] and pq[0] * pq[1] == {p * q}"""
    g = f"""def g():
    n = {p * q}
    d = 2
    while n % d:
        d += 1
    return [d, n // d]"""
    return f, g


@family("numbers")
def digit_sum_multiple_in_range(rng: random.Random, grade: int) -> tuple[str, str]:
    k = rng.randint(3, (9, 60, 400)[grade - 1])
    lo = rng.randint(10, 10 ** (2 * grade + 1))
    hi = lo + rng.randint(10, 30) * k
    s = _digit_sum(rng.randrange(lo + (-lo) % k, hi, k))
    f = f"""def f(n: int):
    return {lo} <= n < {hi} and n % {k} == 0 and sum(int(d) for d in str(n)) == {s}"""
    g = f"""def g():
    lo, hi, k, s = {lo}, {hi}, {k}, {s}
    return next(n for n in range(lo + (-lo) % k, hi, k) if sum(int(d) for d in str(n)) == s)"""
    return f, g


@family("numbers")
def number_from_base_digits(rng: random.Random, grade: int) -> tuple[str, str]:
    base = rng.randint(2, (6, 16, 36)[grade - 1])
    digits = [rng.randrange(1, base)] + [rng.randrange(base) for _ in range(rng.randint(2, 2 + 2 * grade))]
    f = f"""def f(n: int):
    digits = []
    while n > 0:
        n, d = divmod(n, {base})
        digits.append(d)
    return digits[::-1] == {digits}"""
    g = f"""def g():
    base, digits = {base}, {digits}
    n = 0
    for d in digits:
        n = n * base + d
    return n"""
    return f, g


@family("numbers")
def next_prime_in_residue_class(rng: random.Random, grade: int) -> tuple[str, str]:
    m = rng.choice(((2,), (3, 4, 6), (5, 7, 8, 10, 12))[grade - 1])
    r = rng.choice([r for r in range(1, m) if math.gcd(r, m) == 1])
    start = rng.randint(10, 10 ** (2 * grade + 1))
    f = f"""def f(n: int):
    is_prime = lambda k: k > 1 and all(k % d for d in range(2, int(k ** 0.5) + 1))
    return n > {start} and n % {m} == {r} and is_prime(n) and not any(
        is_prime(k) for k in range({start} + 1, n) if k % {m} == {r})"""
    g = f"""def g():
    start, m, r = {start}, {m}, {r}
    is_prime = lambda k: k > 1 and all(k % d for d in range(2, int(k ** 0.5) + 1))
    return next(n for n in range(start + 1, 2 * start + 10) if n % m == r and is_prime(n))"""
    return f, g


@family("numbers")
def integer_root_floor(rng: random.Random, grade: int) -> tuple[str, str]:
    k = rng.choice(((2,), (2, 3), (3, 4, 5))[grade - 1])
    low, high = ((3, 6), (6, 12), (20, 40))[grade - 1]
    big = rng.randint(10**low, 10**high)
    f = f"""def f(n: int):
    return n ** {k} <= {big} < (n + 1) ** {k}"""
    g = f"""def g():
    big, k = {big}, {k}
    lo, hi = 0, big + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if mid ** k <= big else (lo, mid)
    return lo"""
    return f, g


@family("numbers")
def recurrence_term_index(rng: random.Random, grade: int) -> tuple[str, str]:
    a = rng.randint(1, 5 * grade)
    b = a + rng.randint(1, 5 * grade)
    c = rng.randint(1, grade)
    index = rng.randint(3, (12, 30, 80)[grade - 1])
    x, y = a, b
    for _ in range(index):
        x, y = y, c * y + x
    step = "a + b" if c == 1 else f"{c} * b + a"
    f = f"""def f(i: int):
    a, b = {a}, {b}
    for _ in range(i):
        a, b = b, {step}
    return a == {x}"""
    g = f"""def g():
    a, b, c, target = {a}, {b}, {c}, {x}
    i = 0
    while a != target:
        a, b, i = b, c * b + a, i + 1
    return i"""
    return f, g


@family("numbers")
def most_divisors_in_range(rng: random.Random, grade: int) -> tuple[str, str]:
    width = (15, 40, 150)[grade - 1]
    while True:
        lo = rng.randint(2, (100, 2_000, 100_000)[grade - 1])
        counts = sorted((_divisor_count(n), n) for n in range(lo, lo + width))
        if counts[-1][0] > counts[-2][0]:
            break
    hi = lo + width
    f = f"""def f(n: int):
    tau = lambda m: sum(1 + (d * d != m) for d in range(1, int(m ** 0.5) + 1) if m % d == 0)
    return {lo} <= n < {hi} and all(tau(m) < tau(n) for m in range({lo}, {hi}) if m != n)"""
    g = f"""def g():
    lo, hi = {lo}, {hi}
    tau = lambda m: sum(1 + (d * d != m) for d in range(1, int(m ** 0.5) + 1) if m % d == 0)
    return max(range(lo, hi), key=tau)"""
    return f, g


@family("numbers")
def cubic_positive_root(rng: random.Random, grade: int) -> tuple[str, str]:
    a = rng.randint(1, 9) if grade >= 2 else 0
    b = rng.randint(1, 9) if grade == 3 else 0
    while True:
        c = rng.randint(2, (200, 2_000, 20_000)[grade - 1])
        if round(c ** (1 / 3)) ** 3 != c:
            break
    terms = "x ** 3" + (f" + {b} * x ** 2" if b else "") + (f" + {a} * x" if a else "")
    f = f"""def f(x: float):
    return x > 0 and abs({terms} - {c}) < 1e-6"""
    g = f"""def g():
    a, b, c = {a}, {b}, {c}
    lo, hi = 0.0, c + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid ** 3 + b * mid ** 2 + a * mid < c else (lo, mid)
    return lo"""
    return f, g


@family("numbers")
def collatz_steps_in_range(rng: random.Random, grade: int) -> tuple[str, str]:
    width = (10, 50, 300)[grade - 1]
    while True:
        lo = rng.randint(2, (60, 2_000, 100_000)[grade - 1])
        steps = [_collatz_steps(n) for n in range(lo, lo + width)]
        unique = [s for s in steps if steps.count(s) == 1]
        if unique:
            break
    target = rng.choice(unique)
    hi = lo + width
    f = f"""def f(n: int):
    m, steps = n, 0
    while m > 1 and steps < 1000:
        m, steps = (m // 2 if m % 2 == 0 else 3 * m + 1), steps + 1
    return {lo} <= n < {hi} and steps == {target}"""
    g = f"""def g():
    lo, hi, target = {lo}, {hi}, {target}
    for n in range(lo, hi):
        m, steps = n, 0
        while m > 1:
            m, steps = (m // 2 if m % 2 == 0 else 3 * m + 1), steps + 1
        if steps == target:
            return n"""
    return f, g


@family("numbers")
def pythagorean_triple_with_perimeter(rng: random.Random, grade: int) -> tuple[str, str]:
    bound = (300, 1_000, 6_000)[grade - 1]
    while True:
        m = rng.randint(2, 30)
        n = rng.randint(1, m - 1)
        if (m - n) % 2 and math.gcd(m, n) == 1 and 2 * m * (m + n) <= bound:
            break
    perimeter = 2 * m * (m + n) * rng.randint(1, bound // (2 * m * (m + n)))
    f = f"""def f(t: List[int]):
    return len(t) == 3 and 0 < t[0] < t[1] < t[2] and t[0] ** 2 + t[1] ** 2 == t[2] ** 2 and sum(t) == {perimeter}"""
    g = f"""def g():
    p = {perimeter}
    for a in range(1, p // 3):
        # From a + b + c = p and a^2 + b^2 = c^2: b = p (p - 2a) / (2 (p - a)).
        b, rest = divmod(p * (p - 2 * a), 2 * (p - a))
        if rest == 0 and b > a:
            return [a, b, p - a - b]"""
    return f, g


@family("numbers")
def bezout_coefficients(rng: random.Random, grade: int) -> tuple[str, str]:
    common = rng.randint(1, (1, 30, 200)[grade - 1])
    nums = [common * rng.randint(2, (60, 3_000, 5_000)[grade - 1]) for _ in range(2 if grade < 3 else 3)]
    gcd = math.gcd(*nums)
    f = f"""def f(xs: List[int]):
    return len(xs) == {len(nums)} and sum(c * x for c, x in zip({nums}, xs)) == {gcd}"""
    g = f"""def g():
    nums = {nums}
    coeffs, acc = [1], nums[0]
    for m in nums[1:]:
        r0, r1, s0, s1 = acc, m, 1, 0
        while r1:
            q = r0 // r1
            r0, r1, s0, s1 = r1, r0 - q * r1, s1, s0 - q * s1
        coeffs = [c * s0 for c in coeffs] + [(r0 - s0 * acc) // m]
        acc = r0
    return coeffs"""
    return f, g


@family("numbers")
def floats_with_sum_and_product(rng: random.Random, grade: int) -> tuple[str, str]:
    scale = (1, 10, 100)[grade - 1]
    low = 1 if grade == 1 else -20 * scale
    x, y = sorted(rng.sample(range(low, 20 * scale), 2))
    total, product = round((x + y) / scale, 6), round(x * y / scale**2, 6)
    f = f"""def f(xs: List[float]):
    x, y = xs
    return x < y and abs(x + y {_minus(total)}) < 1e-6 and abs(x * y {_minus(product)}) < 1e-6"""
    g = f"""def g():
    total, product = {total}, {product}
    root = (total ** 2 - 4 * product) ** 0.5
    return [(total - root) / 2, (total + root) / 2]"""
    return f, g


@family("numbers")
def multiple_written_with_two_digits(rng: random.Random, grade: int) -> tuple[str, str]:
    k = rng.randint(2, (30, 200, 2_000)[grade - 1])
    digit = rng.randint(1, (2, 9, 9)[grade - 1])
    f = f'''def f(n: int):
    return n > 0 and n % {k} == 0 and set(str(n)) <= {{"0", "{digit}"}}'''
    # Breadth-first over numbers made of 0 and the digit, keeping the first of each remainder.
    g = f"""def g():
    k, digit = {k}, {digit}
    seen, queue = {{digit % k}}, [digit]
    for n in queue:
        if n % k == 0:
            return n
        for m in (10 * n, 10 * n + digit):
            if m % k not in seen:
                seen.add(m % k)
                queue.append(m)"""
    return f, g


FAMILIES = families_in(globals())
