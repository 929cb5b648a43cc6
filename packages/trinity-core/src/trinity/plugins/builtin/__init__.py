"""trinity-core's own registrations, one module per area, loaded through the same entry points as any plugin.

They live here, away from the packages they register, so that loading them imports nothing
heavy: every target is a dotted path.
"""
