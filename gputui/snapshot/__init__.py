"""The monitor's data model: frozen snapshots of GPUs, processes and the host
(:mod:`.model`) and their JSON codec for recordings and ``--json`` (:mod:`.codec`)."""
