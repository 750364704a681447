"""Root's programs are found where a user's PATH leaves the sbin folders out."""

from rlsim.host import programs


def test_the_sbin_folders_are_added_last_and_once():
    assert programs.search_path("/usr/bin:/bin") == "/usr/bin:/bin:/usr/sbin:/sbin"
    assert programs.search_path("/sbin:/usr/bin") == "/sbin:/usr/bin:/usr/sbin"
