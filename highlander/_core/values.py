"""Small immutable value types, without ``dataclasses``, ``typing`` or ``compile()``.

A process learns whether it holds the project within milliseconds of its
start, and everything it imports on the way is on that clock.
``dataclasses`` loads ``inspect`` and generates methods with ``exec``;
``typing.NamedTuple`` loads ``typing`` and compiles its annotations; the
first ``compile()`` of a CPython process alone costs 0.7 ms.  Together that
was about 5 ms of a duplicate's 22 ms verdict (docs/performance.md).

A :class:`Value` subclass declares its fields as annotations (a class
attribute is the default) and may check them in ``_validate``.  Instances
are immutable, compare equal by type and fields, and offer ``_asdict()`` and
``_replace()``.  :func:`typing.dataclass_transform` tells type checkers the
same, so constructor calls are checked as for a frozen dataclass.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (2 ms on the claim path).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self, dataclass_transform
else:

    def dataclass_transform(**_: object) -> object:
        """At runtime a no-op: only type checkers read it."""
        return lambda cls: cls


@dataclass_transform(frozen_default=True)
class Value:
    """Base of Highlander's immutable records; see the module docstring."""

    __slots__ = ()
    #: The fields, in declaration order (base classes' first).
    FIELDS: ClassVar[tuple[str, ...]] = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Not inspect.get_annotations: importing inspect is a cost avoided here.
        declared = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        own = tuple(n for n, kind in declared.items() if not _is_classvar(kind))
        cls.FIELDS = tuple(n for n in cls.FIELDS if n not in own) + own
        cls._DEFAULTS = {**cls._DEFAULTS, **{n: cls.__dict__[n] for n in own if n in cls.__dict__}}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name, fields = type(self).__name__, self.FIELDS
        if len(args) > len(fields):
            raise TypeError(f"{name} takes {len(fields)} fields, {len(args)} were given")
        values = dict(zip(fields, args, strict=False))
        for key, value in kwargs.items():
            if key not in fields or key in values:
                problem = "twice" if key in values else "that it does not have"
                raise TypeError(f"{name} got field {key!r} {problem}")
            values[key] = value
        for field in fields:
            if field not in values and field not in self._DEFAULTS:
                raise TypeError(f"{name} is missing field {field!r}")
            object.__setattr__(self, field, values.get(field, self._DEFAULTS.get(field)))
        self._validate()

    def _validate(self) -> None:
        """Raise if a field is invalid (subclasses that check their fields override it)."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, field) for field in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Value)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{field}={getattr(self, field)!r}" for field in self.FIELDS)
        return f"{type(self).__name__}({shown})"

    def _asdict(self) -> dict[str, Any]:
        """The fields as a dict, in declaration order."""
        return {field: getattr(self, field) for field in self.FIELDS}

    def _replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (and validated)."""
        return type(self)(**{**self._asdict(), **changes})


def _is_classvar(annotation: object) -> bool:
    # A string under ``from __future__ import annotations``, an object otherwise.
    return str(annotation).startswith(("ClassVar", "typing.ClassVar"))
