"""The analyzer's rules, by family; each module registers its rules in
:mod:`gputui.analysis.registry` when imported (``analysis.engine`` imports them
all)."""
