-- Event rows cost less (issue 44, docs/scale.md). Every transition appends an event, and each
-- appended row took an entry in three indexes: the primary key on `id`, `(task_id, id)` and
-- the BRIN on `tx`. No reader looks an event up by its id: the task view and a task's stream
-- go by `(task_id, id)`, the stream of every task by the BRIN on `tx` (then id order within
-- the batch it reads), `slotd check` reads the whole log, and the route list's recent events
-- take the last ids handed out from the identity's sequence. The ids stay unique (the identity
-- hands each out once); a BRIN keeps the recent-id range cheap to find, at almost no cost to
-- an append (ids only grow, as transaction ids do). SQLite needs none of this: its `id` is
-- the rowid, the table itself.
ALTER TABLE unit_events DROP CONSTRAINT unit_events_pkey;
CREATE INDEX unit_events_id ON unit_events USING brin (id);
