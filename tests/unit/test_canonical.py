"""The fast canonical encoder is byte-for-byte RFC 8785 (as the rfc8785 package writes it),
over arbitrary JSON values; where it cannot be, it defers and refuses what RFC 8785 refuses."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.canonical import _plain, dumps
from jobwarden.models.history.hash_form import canonical, hashable

SAFE = 2**53 - 1
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=500)
@given(values)
def test_the_fast_encoder_writes_the_bytes_rfc8785_writes(value: Any) -> None:
    try:
        expected = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError):
        with pytest.raises((rfc8785.CanonicalizationError, ValueError)):
            dumps(value)
        return
    assert dumps(value) == expected


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ({"a": 1.5, "b": [0.25, "x"]}, True),
        (2.0, False),  # ECMAScript writes 2, Python 2.0
        (0.0, False),
        (1e-05, False),  # Python switches to exponent notation below 1e-4
        (1e16, False),
        ({"\U0001f600": 1}, False),  # UTF-16 order differs from code points above U+FFFF
        (2**53, False),  # outside the exact range: rfc8785 refuses it
    ],
)
def test_the_fast_path_is_taken_only_where_the_two_spellings_agree(value: Any, plain: bool) -> None:
    assert _plain(value) is plain
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(rfc8785.CanonicalizationError):
            dumps(value)
        return
    assert dumps(value) == expected


def test_a_lone_surrogate_is_refused_as_rfc8785_refuses_it() -> None:
    with pytest.raises((rfc8785.CanonicalizationError, ValueError)):
        dumps({"a": "\ud800"})


# What the history hashes: beyond plain JSON, integers past 2^53 and tuples (tagged or
# listed by hashable) and non-string keys, as json.dumps accepts them.
hashed_values = st.recursive(
    scalars | st.integers(),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text() | st.integers(-SAFE, SAFE) | st.booleans(), inner, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=500)
@given(hashed_values)
def test_the_history_skips_its_hashable_walk_only_where_it_changes_nothing(value: Any) -> None:
    try:
        expected = dumps(hashable(value))
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        with pytest.raises(type(exc)):
            canonical(value)
        return
    assert canonical(value) == expected
