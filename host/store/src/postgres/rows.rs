//! PostgreSQL's own row helpers: qualified column lists and the order of `RETURNING` rows.
//! The row decoders and column lists both stores share are in [`crate::shared`],
//! re-exported here.

use slotd_core::model::Unit;

pub(super) use crate::shared::postgres::{unit_from_row, units_from_rows};
pub(super) use crate::shared::{TERMINAL_SQL, UNIT_COLS, add_count, parse_status};

/// [`UNIT_COLS`] qualified with `units.`, for statements that join other relations with
/// columns of the same names (`RETURNING` of an `UPDATE … FROM`).
pub(super) fn unit_cols_of_units() -> String {
    unit_cols_of("units")
}

/// [`UNIT_COLS`] qualified with `alias.`.
pub(super) fn unit_cols_of(alias: &str) -> String {
    UNIT_COLS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Put `units` in the order of `ids` (a `RETURNING` list comes back in no particular order).
pub(super) fn sort_like(units: &mut [Unit], ids: &[String]) {
    let order: std::collections::HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    units.sort_by_key(|u| order.get(u.id.as_str()).copied().unwrap_or(usize::MAX));
}
