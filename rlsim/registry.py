"""Extension by entry point, as pytest finds its ``pytest11`` plugins: faults, checks and adapters
are found in the entry-point groups ``rlsim.faults``, ``rlsim.checks`` and ``rlsim.adapters``. The
built-in ones register the same way (rlsim's own pyproject.toml), so a package of the user's adds
one without editing rlsim::

    [project.entry-points."rlsim.checks"]
    steps_per_minute = "mypkg.checks:steps_per_minute"   # a Check, made with @rlsim.checks.check

A registry loads its group once, on first use. Two packages registering one name is refused,
naming both (which one wins would depend on the install order), and so is an object whose own
name is not its entry point's, one that is not what the group holds (a check that is no Check),
one that cannot be built, and one whose import fails or exits (``SystemExit(0)`` at import would
end ``rlsim validate bad.yaml`` with exit 0, saying nothing): each is named with its package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points


class RegistryError(RuntimeError):
    """An entry point that cannot serve: the message names the package(s) and the fix."""


class Registry(Mapping):
    """Name -> object of one entry-point group, loaded on first use. ``name_of`` gives an
    object's own name (``Fault.name``, ``Adapter.name``, ``Check.name``); ``make`` turns what the
    entry point names into what the registry holds (an adapter's class into its instance)."""

    def __init__(self, group: str, what: str, name_of: Callable[[object], str],
                 make: Callable[[object], object] = lambda obj: obj, *,
                 accepts: Callable[[object], bool] = lambda obj: True,
                 kind: str = "") -> None:
        self.group, self.what, self.name_of, self.make = group, what, name_of, make
        self.accepts, self.kind = accepts, kind or what
        self._items: dict[str, object] | None = None

    def _load(self) -> dict[str, object]:
        if self._items is not None:
            return self._items
        found: dict[str, tuple[object, str]] = {}
        for ep in sorted(entry_points(group=self.group), key=lambda e: e.name):
            owner = ep.dist.name if ep.dist is not None else "?"
            if ep.name in found and found[ep.name][1] != owner:
                raise RegistryError(
                    f"{self.what} {ep.name!r} is registered by two packages, {found[ep.name][1]} "
                    f"and {owner} (entry point group {self.group}); uninstall one or rename its "
                    "entry point")
            where = f"{self.what} {ep.name!r} of package {owner} ({ep.value})"
            try:
                obj = ep.load()
            except (Exception, SystemExit) as e:  # noqa: BLE001 - named, not a traceback or exit
                raise RegistryError(f"{where} does not load: {type(e).__name__}: {e}; fix or "
                                    "uninstall that package") from None
            if not self.accepts(obj):
                raise RegistryError(f"{where} is {type(obj).__name__} {obj!r:.80}, not a "
                                    f"{self.kind}; fix or uninstall that package")
            try:
                own = self.name_of(obj)
                made = self.make(obj)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - as above
                raise RegistryError(f"{where} cannot be used: {type(e).__name__}: {e}; fix or "
                                    "uninstall that package") from None
            if own != ep.name:
                raise RegistryError(f"{where} names itself {own!r}; make the two the same")
            found[ep.name] = (made, owner)
        if not found:
            raise RegistryError(f"no {self.what}s are registered (entry point group "
                                f"{self.group}): rlsim is not installed in this environment; "
                                "pip install rlsim (or pip install -e . in its checkout)")
        self._items = {name: obj for name, (obj, _) in found.items()}
        return self._items

    def __getitem__(self, name: str):
        return self._load()[name]

    def __setitem__(self, name: str, obj) -> None:
        """Put ``obj`` in under ``name`` for this process (a test's stand-in)."""
        self._load()[name] = obj

    def __delitem__(self, name: str) -> None:
        del self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())
