"""Errors of the planner, in the specs error tree so the CLI prints them as one line (exit 2).

SpecError (prfaas.specs.errors)
├── SpecFileError          a scenario file that does not validate (names the field)
└── PlanError
    └── InfeasiblePlanError  valid inputs with no serving configuration (e.g. decode SLO unmet)
"""

from __future__ import annotations

from prfaas.specs.errors import SpecError


class PlanError(SpecError):
    """Base of the planner's own errors."""


class InfeasiblePlanError(PlanError):
    pass
