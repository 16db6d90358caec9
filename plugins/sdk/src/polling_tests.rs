use super::*;

const LIMITS: ListLimits = ListLimits {
    max_pages: 3,
    page_size_min: 50,
    page_size_per_unit: 4,
    page_size_max: 500,
    clock_skew_ms: 600_000,
};

fn waiting(ids: &[&str], submitted_at_ms: u64) -> Vec<Waiting> {
    ids.iter()
        .enumerate()
        .map(|(index, id)| Waiting {
            index,
            job_id: id.to_string(),
            submitted_at_ms: Some(submitted_at_ms),
        })
        .collect()
}

fn entry(id: &str, created_at_ms: i64) -> Entry<String> {
    Entry {
        job_id: id.into(),
        created_at_ms: Some(created_at_ms),
        item: format!("task {id}"),
    }
}

#[test]
fn pages_grow_with_the_units_due_within_the_maximum() {
    assert_eq!(LIMITS.page_size(2), 50);
    assert_eq!(LIMITS.page_size(18), 72);
    assert_eq!(LIMITS.page_size(400), 500);
    let wide = ListLimits {
        page_size_max: 1000,
        ..LIMITS
    };
    assert_eq!(wide.page_size(400), 1000);
}

#[test]
fn a_round_pairs_answers_with_their_owners() {
    let mut round = Round::new();
    assert!(round.is_empty());
    round.push('a', "GET /1");
    round.push('b', "GET /2");
    let answers = round.send(|calls| calls.iter().map(|c| c.len()).collect::<Vec<_>>());
    assert_eq!(answers, [('a', 6), ('b', 6)]);
}

#[test]
fn units_found_on_a_full_page_need_no_more_pages() {
    let mut poll = ListPoll::new(waiting(&["1", "2"], 1_000), LIMITS);
    assert_eq!(poll.next_page(), Some((1, 50)));
    let listing = poll.absorb(Some((50, vec![entry("2", 1_000), entry("1", 900)])));
    assert_eq!(
        listing.found,
        [(1, "task 2".to_string()), (0, "task 1".to_string())]
    );
    assert!(listing.give_up.is_empty());
    assert_eq!(poll.next_page(), None);
}

#[test]
fn paging_stops_at_the_last_page_at_older_entries_and_at_the_page_limit() {
    // A short page is the last one.
    let mut poll = ListPoll::new(waiting(&["1", "2", "3"], 1_000), LIMITS);
    let listing = poll.absorb(Some((2, vec![entry("2", 1_000), entry("1", 900)])));
    assert_eq!(listing.give_up, [2]);
    assert_eq!(poll.next_page(), None);

    // A full page of entries far older than every waiting unit: the units are not further on.
    let mut poll = ListPoll::new(waiting(&["1", "2"], 10_000_000), LIMITS);
    let listing = poll.absorb::<String>(Some((50, vec![entry("x", 1)])));
    assert_eq!(listing.give_up, [0, 1]);

    // Full pages of recent entries: next page, up to the limit.
    let mut poll = ListPoll::new(waiting(&["1", "2"], 1_000), LIMITS);
    for page in 1..=3 {
        assert_eq!(poll.next_page(), Some((page, 50)));
        let listing = poll.absorb::<String>(Some((50, vec![entry("x", 1_000)])));
        assert_eq!(listing.give_up.is_empty(), page < 3, "page {page}");
    }
    assert_eq!(poll.next_page(), None);
}

#[test]
fn a_failed_page_sends_everyone_to_single_queries() {
    let mut poll = ListPoll::new(waiting(&["1", "2"], 1_000), LIMITS);
    let listing = poll.absorb::<String>(None);
    assert_eq!(listing.give_up, [0, 1]);
    assert!(listing.found.is_empty());
}

#[test]
fn path_segments_are_percent_encoded() {
    assert_eq!(path_segment("u-1_a.b~c"), "u-1_a.b~c");
    assert_eq!(path_segment("a/b c?"), "a%2Fb%20c%3F");
}
