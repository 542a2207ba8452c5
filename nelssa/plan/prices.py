"""What a fleet costs: the prices a plan is priced at (defaults and their sources, in one
configuration class), a prices file read into them, and the cost arithmetic (capital plus
energy, per hour and per million output tokens).

Energy goes through one boundary, ``energy_cost(result, prices)``: it reads each tier's
average power from the evaluated point (``TierPower``), which the fleet's energy model gives
for the run at the point's rate (``search.fleet_power``: emu/energy.py over the hardware
description's power figures). Prices hold no hardware figure.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nelssa.emu.latency.fields import FieldError, Num

HOURS_PER_YEAR = 8766.0
"""365.25 days."""
PRICE = Num("a finite number >= 0 (US dollars)", lo=0, most=1e9)
YEARS = Num("a number of years > 0", lo=0, lo_open=True, most=100)
PUE = Num("a power usage effectiveness >= 1", lo=1, most=10)


def _num(spec: Num, default: Any) -> Any:
    return field(default=default, metadata={"num": spec})


@dataclass(frozen=True)
class Prices:
    """The prices a fleet is costed at. Each part is priced per hour (rented), or by its
    capital cost over ``lifetime_years`` when that is given (bought): a capital cost replaces
    the hourly price of its part."""

    gpu_per_hour: float = _num(PRICE, 2.79)
    """One GPU (decode or prefill), $/hour. Default: RunPod Secure Cloud, H100 80GB PCIe,
    about $2.79/hour (Spheron, "RunPod H100 Pricing 2026", 2026-05-22); the preset GPU is the
    H100 NVL (94 GB, PCIe)."""
    pnm_device_per_hour: float = _num(PRICE, 0.35)
    """One PNM device, $/hour. No market price exists for a PNM device: the default is an
    assumption (a CXL memory module of 64 GB of DDR5 with an FPGA or ASIC beside it), and
    ``docs/results/plan.md`` gives the device price at which NELSSA breaks even."""
    pnm_node_per_hour: float = _num(PRICE, 0.50)
    """One PNM node's host (the server the devices sit in), $/hour. An assumption, as above."""
    gpu_capital: float | None = _num(PRICE, None)
    """One GPU bought, $ (with ``lifetime_years``; replaces ``gpu_per_hour``)."""
    pnm_device_capital: float | None = _num(PRICE, None)
    """One PNM device bought, $ (with ``lifetime_years``)."""
    pnm_node_capital: float | None = _num(PRICE, None)
    """One PNM node's host bought, $ (with ``lifetime_years``)."""
    lifetime_years: float = _num(YEARS, 4.0)
    """Years over which a bought part's capital cost is spread (straight line)."""
    electricity_per_kwh: float = _num(PRICE, 0.1194)
    """Electricity, $/kWh. Default: U.S. EIA Electricity Monthly Update (September 2024
    data), the median state's average revenue per kWh, 11.94 cents (Kansas)."""
    pue: float = _num(PUE, 1.58)
    """Power usage effectiveness: facility power over IT power. Default: the industry average
    of the Uptime Institute Global Data Center Survey 2023, 1.58."""

    def hourly(self, part: str) -> float:
        """$/hour of one ``gpu``, ``pnm_device`` or ``pnm_node``: its capital over its
        lifetime when bought, else its hourly price."""
        capital = getattr(self, f"{part}_capital")
        if capital is not None:
            return capital / (self.lifetime_years * HOURS_PER_YEAR)
        return getattr(self, f"{part}_per_hour")

    def source(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class PricesError(ValueError):
    """A prices file or value that cannot be used (names the file and field)."""


PRICE_FIELDS = tuple(f.name for f in dataclasses.fields(Prices))


def prices_from(raw: Any, where: str, base: Prices | None = None) -> Prices:
    """``raw`` (a prices file's content: an object of Prices fields) over ``base``."""
    if not isinstance(raw, dict):
        raise PricesError(f"{where}: must be an object of prices, got {type(raw).__name__}")
    specs = {f.name: f.metadata["num"] for f in dataclasses.fields(Prices)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in specs:
            raise PricesError(f"{where}: unknown field {key!r} (fields: "
                              f"{', '.join(PRICE_FIELDS)})")
        if value is None and getattr(Prices, key, 0) is None:
            values[key] = None
            continue
        try:
            values[key] = specs[key].check(value, key)
        except FieldError as e:
            raise PricesError(f"{where}: {e}") from None
    return dataclasses.replace(base or Prices(), **values)


def load_prices(path: str | Path, base: Prices | None = None) -> Prices:
    """A prices file (JSON, YAML or TOML, read with bounds) over ``base``."""
    from nelssa.emu.latency.description import DescriptionError, read_document

    try:
        raw = read_document(Path(path), "prices file")
    except DescriptionError as e:
        raise PricesError(str(e)) from None
    return prices_from(raw, f"prices file {path}", base)


# -- the fleet a point prices ---------------------------------------------------------------------
@dataclass(frozen=True)
class Parts:
    """What a fleet mix is made of, as priced."""

    decode_gpus: int
    prefill_gpus: int
    pnm_nodes: int
    pnm_devices: int
    """In all (nodes x devices per node)."""


@dataclass(frozen=True)
class TierPower:
    """Average power per tier over a run, W (the fleet report's per-tier figures)."""

    decode_gpus: float
    prefill_gpus: float
    pnm_nodes: float
    """The PNM nodes with their devices."""
    counted: tuple[str, ...]
    """Which tiers have a figure (a tier without one is 0 above and named as not counted)."""
    source: str

    @property
    def total(self) -> float:
        return self.decode_gpus + self.prefill_gpus + self.pnm_nodes


class PowerReport(Protocol):
    """What ``energy_cost`` reads from an evaluated point: its parts and, when the fleet
    reports it, its per-tier average power."""

    parts: Parts
    power: TierPower | None


def tier_power(point: PowerReport) -> TierPower:
    """The point's per-tier average power (``point.power``, from ``search.fleet_power``); none
    where no rate met the SLO (nothing is served there: its cost per token is infinite)."""
    if point.power is None:
        return TierPower(0.0, 0.0, 0.0, (), "no rate met the SLO: no run to measure")
    return point.power


@dataclass(frozen=True)
class Cost:
    """A point's cost at its sustainable rate."""

    capital_per_hour: float
    energy_per_hour: float
    output_tps: float
    """Output tokens per second served at the sustainable rate."""
    watts: float
    """IT power (before PUE)."""
    power_counted: tuple[str, ...]

    @property
    def per_hour(self) -> float:
        return self.capital_per_hour + self.energy_per_hour

    @property
    def per_million_tokens(self) -> float:
        """$ per million output tokens (inf when nothing is served)."""
        if self.output_tps <= 0:
            return math.inf
        return self.per_hour / (self.output_tps * 3600) * 1e6

    @property
    def joules_per_token(self) -> float:
        """IT energy per output token, J (before PUE)."""
        return self.watts / self.output_tps if self.output_tps > 0 else math.inf


def capital_per_hour(parts: Parts, prices: Prices) -> float:
    return ((parts.decode_gpus + parts.prefill_gpus) * prices.hourly("gpu")
            + parts.pnm_devices * prices.hourly("pnm_device")
            + parts.pnm_nodes * prices.hourly("pnm_node"))


def energy_cost(point: PowerReport, prices: Prices) -> tuple[float, TierPower]:
    """$/hour of electricity for the point's fleet (its per-tier average power times PUE
    times the price of a kWh), and the power it was priced from."""
    power = tier_power(point)
    return power.total / 1000 * prices.pue * prices.electricity_per_kwh, power


def cost(point: PowerReport, output_tps: float, prices: Prices) -> Cost:
    """Capital plus energy for the point's fleet serving ``output_tps`` output tokens/s."""
    energy, power = energy_cost(point, prices)
    return Cost(capital_per_hour(point.parts, prices), energy, output_tps, power.total,
                power.counted)
