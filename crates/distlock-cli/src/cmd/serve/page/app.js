// The live status page: polls api/locks (relative, so the page also works behind a proxy that
// mounts it under a path) and redraws the table in place. Text goes in with textContent only:
// lock and process names come from the store and are never parsed as HTML.
'use strict';

(function () {
  const rows = document.getElementById('rows');
  const table = document.getElementById('locks');
  const empty = document.getElementById('empty');
  const banner = document.getElementById('error');
  const store = document.getElementById('store');
  const summary = document.getElementById('summary');

  // The store reports lease left, not the lease itself: the longest left seen for a holding
  // stands for its full lease (each renewal restores it), so the bar shows how far it has run.
  let longestLease = new Map();
  let refreshMs = 1000;

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function seconds(ms) {
    if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
    const s = Math.floor(ms / 1000);
    if (s < 120) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 120) return m + ' min ' + (s % 60) + ' s';
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }

  function holderCell(holding) {
    const td = el('td');
    if (!holding) {
      td.append(el('span', 'free', 'free'));
    } else if (!holding.holder) {
      td.append(el('span', 'not recorded', 'free'));
    } else {
      const h = holding.holder;
      td.append(el('span', h.process + ' (pid ' + h.pid + ')'));
      td.append(el('span', h.host, 'sub'));
    }
    return td;
  }

  function sinceCell(holding, readAt) {
    const td = el('td');
    if (holding && holding.since_ms !== null) {
      td.textContent = seconds(Math.max(0, readAt - holding.since_ms));
      td.title = 'since ' + new Date(holding.since_ms).toLocaleString();
    } else {
      td.textContent = '–';
    }
    return td;
  }

  function leaseCell(key, holding, seen) {
    const td = el('td');
    if (!holding) {
      td.textContent = '–';
    } else if (holding.lease_left_ms === null) {
      // Sessions (ZooKeeper, etcd, PostgreSQL advisory locks) last as long as the connection.
      td.append(el('span', 'session', 'free'));
    } else {
      const left = holding.lease_left_ms;
      const longest = Math.max(left, longestLease.get(key) || 0, 1);
      seen.set(key, longest);
      const meter = el('meter');
      meter.min = 0;
      meter.max = longest;
      meter.low = longest / 4;
      meter.high = longest / 2;
      meter.optimum = longest;
      meter.value = left;
      meter.setAttribute('aria-label', 'lease left');
      td.append(meter, el('span', seconds(left)));
    }
    return td;
  }

  function waitersCell(waiters) {
    if (waiters !== null) return el('td', waiters, 'num');
    const td = el('td', '–', 'num');
    td.title = 'this store does not keep waiters';
    return td;
  }

  function render(data) {
    const shown = data.url + (data.prefix ? ' · locks named ' + data.prefix + '…' : '');
    store.textContent = '';
    store.append(
      el('span', data.backend + ' store '),
      el('code', shown),
      el('span', ' · read at ' + new Date(data.read_at_ms).toLocaleTimeString()),
    );
    refreshMs = data.refresh_ms || refreshMs;
    showError(data.error);

    const seen = new Map();
    const body = document.createDocumentFragment();
    let held = 0;
    // Only stores that keep waiters count them: null for the others, which the summary omits.
    let waiting = null;
    for (const lock of data.locks) {
      if (lock.holdings.length) held += 1;
      if (lock.waiters !== null) waiting = (waiting || 0) + lock.waiters;
      // A free lock still listed (waiters queued) gets one row that says so.
      const holdings = lock.holdings.length ? lock.holdings : [null];
      for (const holding of holdings) {
        const key = lock.kind + '\u0000' + lock.name + '\u0000' + (holding ? holding.token : '');
        const tr = el('tr');
        tr.dataset.lock = lock.name;
        // The lock's name heads its row, for screen readers reading a cell's context.
        const name = el('th', lock.name, 'name');
        name.scope = 'row';
        tr.append(
          name,
          el('td', lock.kind),
          holderCell(holding),
          el('td', holding ? holding.token : '–', 'num'),
          sinceCell(holding, data.read_at_ms),
          leaseCell(key, holding, seen),
          waitersCell(lock.waiters),
        );
        body.append(tr);
      }
    }
    longestLease = seen;
    rows.replaceChildren(body);
    summary.textContent = held + (held === 1 ? ' lock' : ' locks') + ' held' +
      (waiting === null ? '' : ', ' + waiting + (waiting === 1 ? ' waiter' : ' waiters'));
    const nothing = data.locks.length === 0;
    table.hidden = nothing;
    empty.hidden = !nothing || Boolean(data.error);
  }

  function showError(text) {
    banner.hidden = !text;
    banner.textContent = text || '';
  }

  // One chain of polls: a poll in flight or a timer pending is never doubled (a tab coming back
  // into view asks at once, cancelling the pending timer).
  let timer = null;
  let inFlight = false;

  async function poll() {
    if (inFlight) return;
    clearTimeout(timer);
    if (!document.hidden) {
      inFlight = true;
      try {
        const response = await fetch('api/locks', { cache: 'no-store' });
        if (!response.ok) throw new Error('HTTP ' + response.status);
        render(await response.json());
      } catch (e) {
        showError('Cannot reach distlock serve: ' + e.message + ' (retrying)');
      } finally {
        inFlight = false;
      }
    }
    timer = setTimeout(poll, refreshMs);
  }

  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) poll();
  });
  poll();
})();
