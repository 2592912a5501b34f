"""torch._C stand-in: the OOM observer hook (an observer is called as fn(device, alloc, device_total, device_free))."""
import torch


def _cuda_attach_out_of_memory_observer(observer):
    if not callable(observer):
        raise TypeError("observer must be callable")
    torch.CALLS.append(("_cuda_attach_out_of_memory_observer", {}))
    torch.OBSERVERS.append(observer)
