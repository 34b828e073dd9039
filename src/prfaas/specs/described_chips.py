"""Chips a file describes itself: the `chips:` section of a scenario (planner.scenario) and of
a deployment file (serve.config.deployment), for chips the catalog lacks.

One schema (`specs.files.ChipFile`, chips.yaml's fields plus an optional `aic_system:`) and one
set of checks (`described_chips`) for both files, so a chip a plan ran on is written into the
deployment it becomes (`prfaas plan --deployment-out`) and read back as the same `ChipSpec`:

    chips:
      h100-nvl: {display_name: NVIDIA H100 NVL, dense_bf16_tflops: 835.5, hbm_gb: 94, ...,
                 aic_system: h100_sxm}
    ...  chip: h100-nvl                      # a cluster's (scenario) or an instance's (deployment)

A name is looked up without case, the file's chips first, then the catalog (`resolve_chip`).
"""

from __future__ import annotations

from collections.abc import Mapping

from prfaas.specs.catalog import chip_names, get_chip
from prfaas.specs.chip import ChipSpec
from prfaas.specs.errors import SpecFileError, UnknownChipError
from prfaas.specs.files import ChipFile


def described_chips(section: Mapping[str, ChipFile], where: str) -> dict[str, ChipSpec]:
    """A file's own chips by (lower-case) name; `where` names the section in errors (e.g.
    `scenario.yaml: chips`). A catalog chip's name is refused (one chip per name, so a plan's
    line names what it ran on), and so is an `aic_system` that the installed aiconfigurator
    lacks (none installed: not checked, the timing says so). Each problem is one line,
    a `SpecFileError` naming `where.name`."""
    from prfaas.specs.aic import aic_systems  # imports aiconfigurator where a chip names one

    chips = {}
    for name, chip in section.items():
        key = f"{where}.{name}"
        if name.lower() in chip_names():
            raise SpecFileError(f"{key}: the catalog has a chip {name!r}; name yours otherwise")
        if name.lower() in chips:
            raise SpecFileError(f"{key}: another chip here has this name (names ignore case)")
        systems = aic_systems() if chip.aic_system is not None else ()
        if systems and chip.aic_system not in systems:
            raise SpecFileError(
                f"{key}.aic_system: {chip.aic_system!r} is not one of aiconfigurator's systems "
                f"({', '.join(systems)})"
            )
        chips[name.lower()] = chip.to_spec(name.lower())
    return chips


def resolve_chip(name: str, described: Mapping[str, ChipSpec]) -> ChipSpec:
    """The chip `name` names: the file's own (`described_chips`), else the catalog's; an
    unknown name is an `UnknownChipError` that lists both and says where to describe one."""
    if name.lower() in described:
        return described[name.lower()]
    try:
        return get_chip(name)
    except UnknownChipError:
        known = ", ".join([*chip_names(), *described])
        raise UnknownChipError(
            f"unknown chip {name!r} (known: {known}); or describe it under chips:"
        ) from None
