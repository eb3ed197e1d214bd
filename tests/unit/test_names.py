from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamcore.errors import InvalidNameError, StreamcoreError
from streamcore.names import NO_NAMESPACE, Name

namespaces = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
names_in_ns = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,30}", fullmatch=True)
global_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_]{0,30}", fullmatch=True)


class TestUrnAndId:
    @pytest.mark.parametrize(
        ("urn", "namespace", "name", "id_"),
        [
            ("audit/entries", "audit", "entries", "audit-entries"),
            ("bulk/command", "bulk", "command", "bulk-command"),
            ("import/docs", "import", "docs", "import-docs"),
            ("audit/dlq-my-computation", "audit", "dlq-my-computation", "audit-dlq-my-computation"),
            ("ns_1/0starts_with_digit", "ns_1", "0starts_with_digit", "ns_1-0starts_with_digit"),
        ],
    )
    def test_urn_maps_to_id_and_back(self, urn: str, namespace: str, name: str, id_: str) -> None:
        parsed = Name.of(urn)
        assert (parsed.namespace, parsed.name) == (namespace, name)
        assert parsed.urn == urn
        assert parsed.id == id_
        assert str(parsed) == urn
        assert Name.of_id(id_) == parsed
        assert Name.of_id(id_).urn == urn

    def test_name_without_namespace_has_same_urn_and_id(self) -> None:
        parsed = Name.of("myLog_1")
        assert parsed.namespace == NO_NAMESPACE
        assert parsed.urn == parsed.id == "myLog_1"
        assert Name.of_id("myLog_1") == parsed

    def test_of_returns_a_name_unchanged(self) -> None:
        name = Name.of("audit/entries")
        assert Name.of(name) is name
        assert Name.of_urn("audit/entries") == name

    def test_repr_shows_urn(self) -> None:
        assert repr(Name.of("audit/entries")) == "Name('audit/entries')"

    @given(namespaces, names_in_ns)
    def test_id_round_trips_for_any_valid_name(self, namespace: str, name: str) -> None:
        parsed = Name(namespace, name)
        assert Name.of_id(parsed.id) == parsed
        assert Name.of(parsed.urn) == parsed

    @given(global_names)
    def test_id_round_trips_without_namespace(self, name: str) -> None:
        parsed = Name.of(name)
        assert Name.of_id(parsed.id) == parsed
        assert parsed.urn == name


class TestEquality:
    def test_equal_by_urn_and_hashable(self) -> None:
        a = Name.of("audit/entries")
        b = Name("audit", "entries")
        c = Name.of_id("audit-entries")
        assert a == b == c
        assert len({a, b, c}) == 1
        assert {a: 1}[c] == 1

    def test_different_names_differ(self) -> None:
        assert Name.of("audit/entries") != Name.of("audit/entries2")
        assert Name.of("audit/entries") != Name.of("bulk/entries")
        assert Name.of("entries") != Name.of("audit/entries")

    def test_names_are_immutable(self) -> None:
        name = Name.of("audit/entries")
        with pytest.raises(AttributeError):
            name.name = "other"  # type: ignore[misc]


class TestValidation:
    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ("my-ns/x", r"invalid namespace 'my-ns'.*no '-'"),
            ("1ns/x", r"invalid namespace '1ns'.*no leading digit"),
            ("_ns/x", r"invalid namespace '_ns'"),
            ("/x", r"invalid namespace ''"),
            ("ns/", r"invalid name '' in namespace 'ns'"),
            ("ns/-x", r"invalid name '-x' in namespace 'ns'"),
            ("ns/_x", r"invalid name '_x' in namespace 'ns'"),
            ("ns/a b", r"invalid name 'a b' in namespace 'ns'"),
            ("ns/a/b", r"invalid name 'a/b' in namespace 'ns'"),
            ("ns/é", r"invalid name 'é' in namespace 'ns'"),
            ("my-log", r"invalid name 'my-log': a name without namespace.*use 'namespace/name'"),
            ("-x", r"invalid name '-x': a name without namespace"),
            ("a.b", r"invalid name 'a.b': a name without namespace"),
        ],
    )
    def test_invalid_names_are_rejected_with_the_rule(self, value: str, message: str) -> None:
        with pytest.raises(InvalidNameError, match=message):
            Name.of(value)

    def test_empty_name_is_rejected(self) -> None:
        with pytest.raises(InvalidNameError, match="a name must be a non-empty string, got ''"):
            Name.of("")

    def test_non_string_is_rejected(self) -> None:
        with pytest.raises(InvalidNameError, match="a name must be a non-empty string, got 42"):
            Name.of(42)  # type: ignore[arg-type]

    def test_leading_digit_allowed_in_name_but_not_namespace(self) -> None:
        assert Name.of("ns/1abc").name == "1abc"
        assert Name.of("1abc").urn == "1abc"
        with pytest.raises(InvalidNameError, match="no leading digit"):
            Name.of("1ns/abc")

    def test_dash_allowed_in_name_with_namespace_only(self) -> None:
        assert Name.of("ns/a-b-c").id == "ns-a-b-c"
        with pytest.raises(InvalidNameError, match="without namespace"):
            Name.of("a-b")

    def test_id_with_dash_in_name_splits_on_first_dash(self) -> None:
        parsed = Name.of_id("ns-a-b-c")
        assert (parsed.namespace, parsed.name) == ("ns", "a-b-c")

    def test_too_long_name_is_rejected(self) -> None:
        assert len(Name.of("ns/" + "x" * 197).urn) == 200
        with pytest.raises(InvalidNameError, match="is longer than 200 chars"):
            Name.of("ns/" + "x" * 198)

    def test_errors_are_value_errors_of_the_hierarchy(self) -> None:
        with pytest.raises(ValueError, match="invalid namespace"):
            Name.of("a-b/c")
        assert issubclass(InvalidNameError, StreamcoreError)
