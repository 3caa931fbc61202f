"""Personal rating links: tokens issued, kept across restarts, checked; never stored in the clear server-side."""

import stat

import pytest

from fabnb.qa.access import AccessError, issue_links, rater_of_link, read_links


def _token(url: str) -> str:
    return url.split("token=", 1)[1]


def test_links_are_private_kept_across_restarts_and_each_opens_its_rater_only(tmp_path):
    links = issue_links(["ana", "ben"], "http://10.0.0.5:8866", tmp_path)
    first = dict(read_links(links))
    assert set(first) == {"ana", "ben"} and all(u.startswith("http://10.0.0.5:8866/?rater=") for u in first.values())
    for path in (links, tmp_path / "access.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert all(_token(u) not in (tmp_path / "access.json").read_text() for u in first.values())  # hashes only
    again = dict(read_links(issue_links(["ana", "ben", "chen"], "http://10.0.0.5:8866/", tmp_path)))
    assert again["ana"] == first["ana"] and again["ben"] == first["ben"] and "chen" in again  # links sent stay good
    access = tmp_path / "access.json"
    assert rater_of_link(first["ben"].split("?", 1)[1], access) == "ben"
    with pytest.raises(AccessError, match="belongs to another rater"):
        rater_of_link(f"rater=ana&token={_token(first['ben'])}", access)
    for query in ("", "rater=ana", "rater=ana&token=guess", f"token={_token(first['ana'])}x"):
        with pytest.raises(AccessError, match="personal rating link") as err:
            rater_of_link(query, access)
        assert _token(first["ana"]) not in str(err.value)


def test_serving_beyond_loopback_without_raters_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(AccessError, match="--raters"):
        issue_links([], "http://10.0.0.5:8866/", tmp_path)
    assert not list(tmp_path.iterdir())
