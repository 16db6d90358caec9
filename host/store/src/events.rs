//! Reading the unit event log as a stream (live events, SSE resume): which events, and how far
//! a reader has got.
//!
//! A stream must deliver every event once it is committed, in an order that keeps each unit's
//! transitions in sequence, and resume from a token after a dropped connection without losing
//! any. Reading "ids above the last one seen" does that only where ids are handed out in commit
//! order:
//! - SQLite has one writer: transactions run one after another, so id order is commit order
//!   and the cursor is the last id read.
//! - PostgreSQL hands ids out when rows are inserted, and transactions commit in any order: a
//!   reader could see id 11 committed while id 10's transaction is still open, move past 10,
//!   and never see it. So each event records its transaction (`tx`), and a reader takes only
//!   events of transactions older than every one still running (the snapshot's `xmin`, the
//!   *horizon*): those are all committed or gone. The events between the last horizon and the
//!   new one are a batch, read in id order (a unit's later transition, written by a transaction
//!   that waited for the earlier one's commit, has the higher id), paged by the last id read.

use std::fmt;

/// Whose events a stream reads: a tenant's, of one task or of all its tasks.
#[derive(Clone, Copy, Debug)]
pub struct EventScope<'a> {
    pub tenant: &'a str,
    /// One task (which must be the tenant's), or every task of the tenant.
    pub task_id: Option<&'a str>,
}

/// How far a stream has read; written as the SSE event id (`settled.horizon.id`) and read back
/// from `Last-Event-ID`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCursor {
    /// PostgreSQL: events of transactions below this have all been read. 0 on SQLite.
    pub settled: i64,
    /// PostgreSQL: the horizon of the batch being read (events with `settled <= tx <
    /// horizon`), 0 between batches. 0 on SQLite.
    pub horizon: i64,
    /// The last id read: within the batch on PostgreSQL, overall on SQLite.
    pub id: i64,
}

/// A resume token that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "event cursor {0:?} is not one this server wrote (expected three numbers, \"settled.horizon.id\")"
)]
pub struct BadCursor(pub String);

impl EventCursor {
    /// Parse a token written by [`fmt::Display`].
    pub fn parse(token: &str) -> Result<EventCursor, BadCursor> {
        let bad = || BadCursor(token.chars().take(64).collect());
        let mut parts = token.trim().split('.');
        let mut next = || -> Result<i64, BadCursor> {
            // Digits only (no sign), as the API documents the token.
            let part = parts.next().ok_or_else(bad)?;
            if part.is_empty() || part.len() > 18 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            part.parse().map_err(|_| bad())
        };
        let mut cursor = EventCursor {
            settled: next()?,
            horizon: next()?,
            id: next()?,
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        // A batch ending below where it starts is empty (only a hand-made token says so):
        // read on between batches, from `settled`.
        if cursor.horizon != 0 && cursor.horizon < cursor.settled {
            cursor.horizon = 0;
        }
        Ok(cursor)
    }
}

impl fmt::Display for EventCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.settled, self.horizon, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_named() {
        let c = EventCursor {
            settled: 7,
            horizon: 9,
            id: 1234,
        };
        assert_eq!(EventCursor::parse(&c.to_string()).expect("round trip"), c);
        assert_eq!(
            EventCursor::parse("0.0.0").expect("zeros"),
            EventCursor::default()
        );
        // A batch that ends below its start is read between batches.
        assert_eq!(
            EventCursor::parse("5.3.1").expect("empty batch"),
            EventCursor {
                settled: 5,
                horizon: 0,
                id: 1
            }
        );
        for bad in [
            "",
            "12",
            "1.2",
            "1.2.3.4",
            "a.b.c",
            "-1.0.0",
            "+1.0.0",
            "1.2.x",
            "1.2.1234567890123456789",
        ] {
            let e = EventCursor::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("settled.horizon.id"), "{e}");
        }
    }
}
