"""Which provider contracts may be installed next to the core provider's (pure).

clusterctl (``internal/contract.GetCompatibleVersions``) and the Cluster API operator
apply one rule: a provider is compatible with the core provider if it declares the same
contract, and a ``v1beta2`` core (CAPI 1.11 and later) also accepts ``v1beta1`` providers
until v1beta1 is retired. Collect checks it before any image is downloaded, so an
incompatible set fails on the connected side; verify (and so import) checks it again on
what was signed. Both use this table, so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airgap.providers.types import ProviderType

# Contracts a core provider temporarily accepts besides its own (clusterctl's table).
_ALSO_ACCEPTED: dict[str, tuple[str, ...]] = {"v1beta2": ("v1beta1",)}


@dataclass(frozen=True)
class ContractMember:
    """One provider of a set, as the check sees it; ``subject`` names it in messages."""

    subject: str
    contract: str
    is_core: bool


@dataclass(frozen=True)
class ContractProblem:
    """Why one provider (or the set of core versions) cannot be installed together."""

    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"


def compatible_contracts(core_contract: str) -> tuple[str, ...]:
    """The contracts a core provider of ``core_contract`` accepts, its own first."""
    return (core_contract, *_ALSO_ACCEPTED.get(core_contract, ()))


def is_compatible(contract: str, core_contract: str) -> bool:
    return contract in compatible_contracts(core_contract)


def contract_problems(members: Sequence[ContractMember]) -> list[ContractProblem]:
    """Every reason ``members`` cannot be installed together; empty when they can.

    Core versions travelling together must agree (the operator installs one of them and
    the others must be interchangeable with it); every other provider must be compatible
    with each core contract present. Without a core provider there is nothing to
    compare against: a bundle of extra providers for an existing cluster is fine.
    """
    cores: list[str] = []
    for member in members:
        if member.is_core and member.contract not in cores:
            cores.append(member.contract)
    if not cores:
        return []
    problems: list[ContractProblem] = []
    if len(cores) > 1:
        problems.append(
            ContractProblem(
                ProviderType.CORE.kind,
                f"core provider versions disagree on contract: {', '.join(cores)}",
            )
        )
    for member in members:
        if member.is_core:
            continue
        for core in cores:
            if not is_compatible(member.contract, core):
                problems.append(ContractProblem(member.subject, _incompatible(member, core)))
                break
    return problems


def _incompatible(member: ContractMember, core: str) -> str:
    accepted = ", ".join(compatible_contracts(core))
    return (
        f"contract {member.contract} is not compatible with the core provider's {core} "
        f"(a {core} core accepts {accepted})"
    )
