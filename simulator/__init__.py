"""Placement-quality simulator: replays GPU cluster traces through the allocator's own core."""
