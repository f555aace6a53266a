-- Atomic increment: the store adds one itself, so no update can be lost (a concurrent writer's
-- row is waited for, then `value + 1` computed on its committed value).
-- params: $1 slot
UPDATE demo_counter SET value = value + 1, version = version + 1 WHERE slot = $1;
