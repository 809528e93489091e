"""Trace math shared by the hook (inside the job) and the trace reader.

Standard library only, above :mod:`gputui.protocol` and below :mod:`gputui.hook`:
the timeline of a torch.profiler capture or trace, HTA's metrics, the step
breakdown, kernel classes and names, op rows and their FLOP/byte costs.
"""
