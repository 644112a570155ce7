"""Faults on any cluster backend: injection and healing by one handler per fault family (`faults.families`),
and the pure planning of network rules."""
from .checks import check_fault, check_scenario_faults
from .families import AppHandler, ConsumerHandler
from .injector import ActiveFault, FaultInjector, heal_all

__all__ = ["ActiveFault", "AppHandler", "ConsumerHandler", "FaultInjector", "check_fault", "check_scenario_faults",
           "heal_all"]
