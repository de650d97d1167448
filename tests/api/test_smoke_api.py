"""The first things a user does: start, sign in, call the API."""


def test_first_run_prints_credentials_and_they_sign_in(panel):
    assert panel.username.startswith("admin-")
    assert len(panel.password) >= 16
    client = panel.client(login=False)
    assert client.sign_in(panel.username, panel.password)["success"] is True
    assert client.get("/panel/api/server/status")["success"] is True


def test_admin_admin_is_refused(panel):
    reply = panel.client(login=False).sign_in("admin", "admin")
    assert reply == {"success": False, "msg": "wrong username or password", "obj": None}
