-- 0040: a hold's release records the applied command it was confirmed against.
--
-- A hold asks an operator whether a near-duplicate request should run. By
-- the time the operator answers, another request may have run the same
-- intent (its earlier command resolved not_applied, and the intent freed):
-- releasing the hold then applies the intent a second time. A release of a
-- hold whose intent was applied after the hold opened must now name that
-- applied command (`confirm_applied`), and the hold keeps the name: what the
-- operator knowingly ran again, beside who did it and when.

alter table holds add column confirmed_applied uuid;

comment on column holds.confirmed_applied is
    'For a released hold whose intent had been applied after the hold opened: the applied command the operator confirmed running the intent again despite (the release is refused unless it names it). Null otherwise.';

alter table holds add constraint holds_confirmation_only_when_released
    check (confirmed_applied is null or state = 'released');
