"""torch.cuda stand-in."""
import torch

from . import memory  # noqa: F401


def set_device(device):
    torch.CALLS.append(("set_device", {"device": device}))
