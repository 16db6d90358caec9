//! Declarations `describe` and `stage-pools` may return, and what the host makes of them.
use super::*;
use crate::{PoolInfo, StageInfo, TaskTypeInfo};

fn info() -> HandlerInfo {
    HandlerInfo {
        name: "kling-video".into(),
        version: "1.0.0".into(),
        task_types: vec![TaskTypeInfo {
            name: "video".into(),
            stages: vec![StageInfo {
                name: "main".into(),
                pool: "kling:video".into(),
                alt_pools: Vec::new(),
            }],
        }],
        pools: vec![PoolInfo {
            name: "kling:video".into(),
            default_max_slots: 18,
        }],
    }
}

#[test]
fn a_sound_declaration_passes() {
    assert!(validate_info(&info()).is_ok());
}

#[test]
fn bad_declarations_are_refused_with_the_reason() {
    let mut i = info();
    i.name = "Kling Video".into();
    assert!(format!("{:#}", validate_info(&i).expect_err("refused")).contains("[a-z0-9-]+"));
    let mut i = info();
    i.version = " ".into();
    assert!(validate_info(&i).is_err());
    let mut i = info();
    i.task_types.push(i.task_types[0].clone());
    assert!(format!("{}", validate_info(&i).expect_err("refused")).contains("declared twice"));
    let mut i = info();
    i.task_types[0].stages.clear();
    assert!(validate_info(&i).is_err());
    let mut i = info();
    let s = i.task_types[0].stages[0].clone();
    i.task_types[0].stages.push(s);
    assert!(format!("{}", validate_info(&i).expect_err("refused")).contains("twice"));
    let mut i = info();
    i.task_types[0].stages[0].pool = String::new();
    assert!(validate_info(&i).is_err());
}

#[test]
fn headers_say_what_the_file_is() {
    assert!(
        check_header(b"hello world")
            .expect_err("refused")
            .to_string()
            .contains("not a WebAssembly file")
    );
    let core = [0, b'a', b's', b'm', 1, 0, 0, 0];
    assert!(
        check_header(&core)
            .expect_err("refused")
            .to_string()
            .contains("core WebAssembly module")
    );
    let component = [0, b'a', b's', b'm', 0x0d, 0, 1, 0];
    assert!(check_header(&component).is_ok());
}

#[test]
fn majors_are_read_from_versioned_names() {
    assert_eq!(major("slotd:handler/handler@1.0.0"), Some("1"));
    assert_eq!(major("slotd:handler/handler@2.1.0"), Some("2"));
    assert_eq!(major("slotd:handler/handler"), None);
}

#[test]
fn stage_pools_extend_stages_and_proposals_or_name_the_mistake() {
    let sp = |task: &str, stage: &str, pool: &str, slots: u32| StagePool {
        task_type: task.into(),
        stage: stage.into(),
        pool: PoolInfo {
            name: pool.into(),
            default_max_slots: slots,
        },
    };
    let routed = with_stage_pools(
        info(),
        vec![
            sp("video", "main", "kling:pro", 3),
            sp("video", "main", "kling:video", 18),
        ],
    )
    .expect("valid routes");
    let stage = &routed.task_types[0].stages[0];
    assert_eq!(stage.alt_pools, vec!["kling:pro".to_string()]);
    assert!(stage.allows("kling:pro") && stage.allows("kling:video"));
    assert!(!stage.allows("other"));
    assert!(
        routed
            .pools
            .iter()
            .any(|p| p.name == "kling:pro" && p.default_max_slots == 3)
    );
    assert!(info_notes(&routed).is_empty(), "{:?}", info_notes(&routed));

    let err = with_stage_pools(info(), vec![sp("video", "nope", "p", 1)])
        .expect_err("an undeclared stage");
    assert!(err.to_string().contains("\"nope\""), "{err}");
    let err = with_stage_pools(info(), vec![sp("video", "main", "kling:video", 2)])
        .expect_err("a second default for a proposed pool");
    assert!(err.to_string().contains("18 and with 2"), "{err}");
}
