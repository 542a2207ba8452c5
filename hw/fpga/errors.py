"""What can go wrong between software and a board, one class each, so callers can tell a missing
board from a wrong bitstream from a dead link."""

from __future__ import annotations

from nelssa.driver.remote import PortTimeoutError


class FpgaError(RuntimeError):
    """Base of the errors of the fpga backend."""


class BarError(FpgaError):
    """A BAR that is absent, too small, or not a NELSSA device's."""


class ManifestError(FpgaError):
    """A bitstream manifest that is missing or malformed."""


class MismatchError(FpgaError):
    """A bitstream whose interface or parameters differ from the software's or the manifest's."""


class DeviceNotAnsweringError(FpgaError, PortTimeoutError):
    """The device stopped answering: reads return all ones, its cycle counter stands still, or
    (fake board) its server is gone."""
