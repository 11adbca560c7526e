import pytest
from pydantic import ValidationError

from workbench.config import load_settings
from workbench.errors import ConfigError


def test_defaults_follow_the_spec():
    s = load_settings({}, env_file=None)
    assert s.prompt_cache_metrics_enabled is True
    assert s.prompt_cache_log_requests is False
    assert s.prompt_cache_enabled is False
    assert s.llm_provider is None and s.model_name is None
    assert s.embedder_kind == "local"
    assert s.resolved_metrics_port() == 9090
    assert s.resolved_metrics_port(dev=True) == 9091
    assert s.port == 8000 and s.embed_server_port == 8001
    assert not s.llm_configured


@pytest.mark.parametrize(
    ("env", "name", "expected"),
    [
        (
            {"SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "abc"},
            "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS",
            "integer",
        ),
        (
            {"SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "-3"},
            "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS",
            "greater than 0",
        ),
        ({"SVC_KNOWLEDGE_LLM_PROVIDER": "openai"}, "SVC_KNOWLEDGE_LLM_PROVIDER", "compat"),
        ({"SVC_KNOWLEDGE_EMBEDDER_PROVIDER": "x"}, "SVC_KNOWLEDGE_EMBEDDER_PROVIDER", "compat"),
        (
            {"SVC_KNOWLEDGE_COMPAT_BASE_URL": "localhost:8000/v1"},
            "SVC_KNOWLEDGE_COMPAT_BASE_URL",
            "http(s) URL",
        ),
        (
            {"SVC_KNOWLEDGE_EMBEDDER_BASE_URL": "ftp://x/v1"},
            "SVC_KNOWLEDGE_EMBEDDER_BASE_URL",
            "http(s) URL",
        ),
        (
            {"SVC_KNOWLEDGE_PROMPT_CACHE_ENABLED": "maybe"},
            "SVC_KNOWLEDGE_PROMPT_CACHE_ENABLED",
            "boolean",
        ),
        ({"LOG_LEVEL": "loud"}, "LOG_LEVEL", "DEBUG"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_expectation(env, name, expected):
    with pytest.raises(ConfigError) as info:
        load_settings(env, env_file=None)
    line = str(info.value)
    assert line.startswith(name + ":")
    assert expected in line
    assert "\n" not in line


def test_the_api_key_never_shows():
    s = load_settings(
        {
            "SVC_KNOWLEDGE_COMPAT_API_KEY": "sk-very-secret",
            "SVC_KNOWLEDGE_COMPAT_BASE_URL": "http://127.0.0.1:9/v1",
            "SVC_KNOWLEDGE_MODEL_NAME": "m",
        },
        env_file=None,
    )
    assert "sk-very-secret" not in repr(s)
    assert "sk-very-secret" not in str(s.model_dump())
    assert s.compat_api_key.get_secret_value() == "sk-very-secret"
    assert s.llm_configured


def test_settings_are_frozen_and_read_from_a_dotenv(tmp_path, monkeypatch):
    env = tmp_path / ".env"
    env.write_text(
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL=http://127.0.0.1:8001/v1/\n"
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS=384\n"
    )
    for key in ("SVC_KNOWLEDGE_EMBEDDER_BASE_URL", "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS"):
        monkeypatch.delenv(key, raising=False)
    s = load_settings(env_file=env)
    assert s.embedder_base_url == "http://127.0.0.1:8001/v1"
    assert s.embedder_kind == "compat" and s.embedder_dimensions == 384
    with pytest.raises(ValidationError, match="frozen"):
        s.port = 1  # type: ignore[misc]


def test_a_misspelled_variable_is_named_with_the_closest_setting(caplog):
    from workbench.config import unknown_settings, warn_unknown

    found = unknown_settings(
        ["SVC_KNOWLEDGE_QUEUE_CONCURENCY", "SVC_KNOWLEDGE_PORT", "SVC_KNOWLEDGE_ZZZ", "PATH"]
    )
    assert found == [
        ("SVC_KNOWLEDGE_QUEUE_CONCURENCY", "SVC_KNOWLEDGE_QUEUE_CONCURRENCY"),
        ("SVC_KNOWLEDGE_ZZZ", None),
    ]
    with caplog.at_level("WARNING", logger="workbench.config"):
        warn_unknown(["SVC_KNOWLEDGE_MODLE_NAME"])
        warn_unknown(["SVC_KNOWLEDGE_MODLE_NAME"])  # once a process
    assert caplog.text.count("unknown setting SVC_KNOWLEDGE_MODLE_NAME") == 1
    assert "did you mean SVC_KNOWLEDGE_MODEL_NAME?" in caplog.text


def test_with_no_database_configured_it_is_the_per_user_one(tmp_path):
    data = tmp_path / "xdg"
    s = load_settings({"XDG_DATA_HOME": str(data)}, env_file=None)
    assert s.db_location() == str(data / "knowledge-workbench" / "knowledge.duckdb")
    home = load_settings({"HOME": str(tmp_path)}, env_file=None)
    expected = tmp_path / ".local" / "share" / "knowledge-workbench" / "knowledge.duckdb"
    assert home.db_location() == str(expected)
    # a relative XDG_DATA_HOME is invalid (XDG base directory spec): the home's folder
    relative = load_settings({"XDG_DATA_HOME": "rel", "HOME": str(tmp_path)}, env_file=None)
    assert relative.db_location() == str(expected)


def test_a_configured_database_wins_over_the_per_user_one(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path), "SVC_KNOWLEDGE_DB_PATH": "here.duckdb"}
    assert load_settings(env, env_file=None).db_location() == "here.duckdb"
    flag = load_settings({"XDG_DATA_HOME": str(tmp_path)}, env_file=None, db_path=":memory:")
    assert flag.db_location() == ":memory:"
    url = "postgresql://u:p@localhost:5432/kb"
    shared = load_settings({"SVC_KNOWLEDGE_DATABASE_URL": url}, env_file=None)
    assert shared.db_location() == url


def test_the_process_environment_names_the_per_user_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("SVC_KNOWLEDGE_DB_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    s = load_settings(env_file=None)
    assert s.db_location() == str(tmp_path / "knowledge-workbench" / "knowledge.duckdb")
