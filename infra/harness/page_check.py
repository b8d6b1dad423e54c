"""The try-it page (infra/page/, served by infra/local/page.py) driven in
headless Chromium with real clicks against served functions: a user opens
the coupon center, sees one coupon to grab and one counting down, asks to
be reminded of the one counting down, presses grab, watches the grant become a coupon in the wallet, and sees the
counting-down coupon open when its window does.

Run by the contract test (`make test-contract`), which serves every
function on its own moto; `run` needs only where the functions are and a
way to hand the grant queue to the issuer (the pump's part)."""
import json
import time
import urllib.error
import urllib.request
import uuid

from infra.harness.browser import Browser
from infra.local import page as pagemod

OPENS_IN_MS = 8_000


def create(lambda_base, definition):
    request = urllib.request.Request(
        f"{lambda_base}/lambda-url/admin/admin/coupons",
        data=json.dumps(definition).encode(),
        headers={"content-type": "application/json", "x-admin-actor": "page-check"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as e:
        raise AssertionError(f"creating {definition['couponId']}: {e.code} {e.read()[:300]!r}") from None


def coupon(coupon_id, name, start_ms):
    return {
        "couponId": coupon_id,
        "name": name,
        "amount": 1500,
        "totalStock": 3,
        "perUserLimit": 1,
        "grabStartMs": start_ms,
        "grabEndMs": start_ms + 3_600_000,
        "validFromMs": start_ms,
        "validUntilMs": start_ms + 7 * 86_400_000,
    }


def row(coupon_id, cell):
    """The text of one cell of a coupon's row, as JavaScript."""
    return f"(document.querySelector('#center tr[data-coupon=\"{coupon_id}\"] .{cell}') || {{}}).textContent"


def run(lambda_base, deliver):
    """Drives the page; raises AssertionError naming the step the page
    failed at. `deliver()` hands what the grant queue holds to the issuer."""
    tag = uuid.uuid4().hex[:8]
    now = int(time.time() * 1000)
    open_id, soon_id, user = f"page-{tag}", f"page-soon-{tag}", f"page-user-{tag}"
    create(lambda_base, coupon(open_id, "15 off, now", now - 60_000))
    opens_at = now + OPENS_IN_MS
    create(lambda_base, coupon(soon_id, "15 off, soon", opens_at))
    server = pagemod.start(lambda_base)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with Browser(timeout=60) as b:
            b.goto(url)
            b.type("#user", user)
            b.click("#show")
            step("the coupon center lists both coupons")
            b.wait_for(f"{row(open_id, 'state')} === 'CAN_GRAB'", f"{open_id} as CAN_GRAB")
            b.wait_for(f"{row(soon_id, 'state')} === 'NOT_STARTED'", f"{soon_id} as NOT_STARTED")
            b.wait_for(f"({row(soon_id, 'when')} || '').startsWith('starts in')", "a countdown")
            assert b.eval(f"document.querySelector('#center tr[data-coupon=\"{soon_id}\"] .grab').disabled"), \
                "the grab button of a coupon not started is disabled"

            step("remind me on the coupon counting down")
            b.click(f"#center tr[data-coupon=\"{soon_id}\"] .remind")
            b.wait_for(f"({row(soon_id, 'said')} || '').startsWith('reminder set')", "the reminder set")
            assert b.eval(f"document.querySelector('#center tr[data-coupon=\"{open_id}\"] .remind').disabled"), \
                "no reminder for a coupon on sale with no wave to come"

            step("a press wins and the button turns CLAIMED")
            b.click(f"#center tr[data-coupon=\"{open_id}\"] .grab")
            said = b.wait_for(f"(({row(open_id, 'said')} || '').startsWith('won') && {row(open_id, 'said')})", "a win")
            grant = said.split("grant ", 1)[1].split(" ", 1)[0]
            b.wait_for(f"{row(open_id, 'state')} === 'CLAIMED'", f"{open_id} as CLAIMED")

            step(f"the issuer makes grant {grant} a coupon in the wallet")
            deadline = time.time() + 60
            while not b.eval(f"!!document.querySelector('#wallet li[data-grant=\"{grant}\"]')"):
                if time.time() > deadline:
                    raise AssertionError(f"grant {grant} never reached the wallet")
                deliver()
                time.sleep(0.5)
            b.wait_for(f"{row(open_id, 'said')} === 'won, in the wallet'", "the win in the wallet")
            assert "UNUSED" in b.eval(f"document.querySelector('#wallet li[data-grant=\"{grant}\"]').textContent")

            step("the counting-down coupon opens at its instant")
            wait = max(0, opens_at - int(time.time() * 1000)) / 1000 + 15
            b.wait_for(f"{row(soon_id, 'state')} === 'CAN_GRAB'", f"{soon_id} open", timeout=wait)
    finally:
        server.shutdown()


def step(text):
    print(f"page: {text}", flush=True)
