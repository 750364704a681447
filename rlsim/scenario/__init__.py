"""The scenario engine: the file's form and its loader, the nemesis that fires and heals faults, the
runner that plays a scenario, the session and pool one run shares, and the fault-free twins."""
