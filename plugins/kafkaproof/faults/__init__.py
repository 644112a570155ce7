"""Faults on any cluster backend: injection, healing, and the pure planning of network rules."""
from .checks import check_fault, check_scenario_faults
from .injector import ActiveFault, FaultInjector, heal_all

__all__ = ["ActiveFault", "FaultInjector", "check_fault", "check_scenario_faults", "heal_all"]
