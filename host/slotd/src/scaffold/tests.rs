use std::path::Path;

use super::*;

fn read(dir: &Path, rel: &str) -> String {
    fs::read_to_string(dir.join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// Every file under `dir`, as paths relative to it with `/`.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("under dir");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn writes_a_project_with_the_name_substituted_and_the_sdk_vendored() {
    let tmp = tempfile::TempDir::new().expect("tmp");
    let project = create("echo-it", tmp.path()).expect("created");
    let dir = tmp.path().join("echo-it");
    assert_eq!(project.dir, dir);

    let cargo = read(&dir, "Cargo.toml");
    assert!(cargo.contains("name = \"echo-it\""), "{cargo}");
    assert!(cargo.contains("\n[workspace]\n"), "standalone: {cargo}");
    assert!(cargo.contains("slotd-sdk = { path = \"vendor/slotd-sdk\" }"));
    assert!(read(&dir, ".cargo/config.toml").contains("target = \"wasm32-wasip2\""));
    let lib = read(&dir, "src/lib.rs");
    assert!(lib.contains("pub const NAME: &str = \"echo-it\";"));
    assert!(lib.contains("pub struct EchoItHandler;"));
    assert!(lib.contains("slotd_sdk::export_handler!(EchoItHandler);"));
    // Written on the SDK's piece for submit → poll → result handlers, tested on its support.
    assert!(lib.contains("use slotd_sdk::jobs;"), "{lib}");
    let tests = read(&dir, "src/tests.rs");
    assert!(tests.contains("jobs::tick::<EchoItHandler>"), "{tests}");
    let readme = read(&dir, "README.md");
    assert!(readme.contains("slotd plugin check target/wasm32-wasip2/release/echo_it.wasm"));
    for (rel, _) in project.files() {
        let text = read(&dir, &rel.to_string_lossy());
        for placeholder in ["{{name}}", "{{crate}}", "{{type}}"] {
            assert!(
                !text.contains(placeholder),
                "{placeholder} in {}",
                rel.display()
            );
        }
    }

    // The SDK as compiled in, byte for byte, and nothing else under vendor/.
    for (path, text) in SDK_FILES {
        assert_eq!(&read(&dir, &format!("{SDK_DIR}/{path}")), text, "{path}");
    }
    let vendored: Vec<String> = listing(&dir.join(SDK_DIR));
    let mut embedded: Vec<String> = SDK_FILES.iter().map(|(p, _)| p.to_string()).collect();
    embedded.sort();
    assert_eq!(vendored, embedded);
    assert_eq!(read(&dir, "Cargo.lock"), SDK_LOCK);
}

/// The embedded list is the SDK directory as it is now: a new source file is carried without
/// anyone adding it to a list.
#[test]
fn the_embedded_sdk_is_every_source_file_of_plugins_sdk() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/sdk");
    let mut expected: Vec<String> = listing(&sdk.join("src"))
        .into_iter()
        .filter(|p| p.ends_with(".rs"))
        .map(|p| format!("src/{p}"))
        .collect();
    expected.extend(["Cargo.toml", "README.md", "wit/handler.wit"].map(String::from));
    expected.sort();
    let mut embedded: Vec<String> = SDK_FILES.iter().map(|(p, _)| p.to_string()).collect();
    embedded.sort();
    assert_eq!(embedded, expected);
    for (path, text) in SDK_FILES {
        assert_eq!(&read(&sdk, path), text, "{path} is stale in the binary");
    }
}

#[test]
fn names_become_crate_and_type_names() {
    let project = |name: &str| Project {
        name: name.into(),
        dir: PathBuf::from(name),
    };
    assert_eq!(project("echo").type_name(), "EchoHandler");
    assert_eq!(project("my-handler").type_name(), "MyHandler");
    assert_eq!(project("tts-2b").type_name(), "Tts2bHandler");
    assert_eq!(project("my-handler").crate_name(), "my_handler");
    assert_eq!(
        project("my-handler").wasm_path(),
        Path::new("target/wasm32-wasip2/release/my_handler.wasm")
    );
    let steps = project("my-handler").next_steps();
    for command in [
        "cd my-handler",
        "cargo test --target host-tuple",
        "cargo build --release",
        "slotd plugin check target/wasm32-wasip2/release/my_handler.wasm",
        "[handlers.my-handler] base_url",
    ] {
        assert!(steps.contains(command), "{command} missing from:\n{steps}");
    }
}

#[test]
fn bad_names_are_refused_with_the_reason_and_nothing_is_written() {
    let tmp = tempfile::TempDir::new().expect("tmp");
    let long = "a".repeat(NAME_MAX + 1);
    for (name, reason) in [
        ("", "empty"),
        ("Echo", "must start with a lowercase letter"),
        ("1st", "must start with a lowercase letter"),
        ("-x", "must start with a lowercase letter"),
        ("my_handler", "'_' is not allowed"),
        ("my handler", "' ' is not allowed"),
        ("café", "'é' is not allowed"),
        (long.as_str(), "at most 64"),
        ("std", "the name of a crate"),
        ("slotd-sdk", "the name of a crate"),
    ] {
        let error = create(name, tmp.path()).expect_err(name).to_string();
        assert!(
            error.starts_with(&format!("invalid handler name {name:?}: "))
                && error.contains(reason),
            "{name:?}: {error}"
        );
    }
    assert!(check_name(&"a".repeat(NAME_MAX)).is_ok());
    assert!(check_name("a-1-b2").is_ok());
    assert_eq!(listing(tmp.path()), Vec::<String>::new(), "nothing written");
}

#[test]
fn an_existing_directory_or_file_is_never_touched() {
    let tmp = tempfile::TempDir::new().expect("tmp");
    let taken = tmp.path().join("taken");
    fs::create_dir(&taken).expect("mkdir");
    fs::write(taken.join("Cargo.toml"), "mine").expect("write");
    fs::write(tmp.path().join("a-file"), "mine too").expect("write");

    for name in ["taken", "a-file"] {
        let error = create(name, tmp.path()).expect_err(name);
        assert!(matches!(&error, ScaffoldError::Exists(p) if p == &tmp.path().join(name)));
        assert!(
            error
                .to_string()
                .contains("already exists; nothing was written")
        );
    }
    assert_eq!(read(&taken, "Cargo.toml"), "mine");
    assert_eq!(listing(tmp.path()), ["a-file", "taken/Cargo.toml"]);

    // A --dir that does not exist yet is created.
    let nested = tmp.path().join("new/parent");
    create("fresh", &nested).expect("created under a new parent");
    assert!(nested.join("fresh/src/lib.rs").is_file());
}
