-- The audit journal joins GDPR erasure and export (two more steps of the jobs of 0022).
--
-- The journal is walked by `seq` in ranges (a BRIN index, nearly free to keep on an append-only
-- table, finds a range without a scan), the tenant's rows of each range only. Erasure:
--   - rows about the actor's own messages (it published them): `delete` removes them; `redact`
--     clears their correlation id and replaces their payload by the marker;
--   - rows the actor wrote (its claims, completions, management changes), and rows whose payload
--     names it as the claimer: the actor becomes `redacted`, the payload the marker. The audit log
--     keeps that something happened, not who did it.
-- The step runs first: it finds the actor's messages before the message step changes them.
-- Export: every row the actor wrote.

CREATE INDEX work_journal_seq_brin ON work_journal USING brin (seq);

-- The journal's last seq handed out (the end of a walk): no scan needed.
CREATE FUNCTION work_journal_last_seq() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('work_journal', 'seq')::regclass), 0)
$$;

CREATE FUNCTION work_gdpr_erase_audit(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_lo bigint := coalesce(p_after::bigint, 0);
    v_hi bigint := coalesce(p_after::bigint, 0) + p_limit;
    v_mine uuid[];
    v_more int;
BEGIN
    v_mine := ARRAY(SELECT DISTINCT r.message_id FROM work_journal r JOIN work_messages m ON m.id = r.message_id
                    WHERE r.seq > v_lo AND r.seq <= v_hi AND r.tenant_id = j.tenant_id
                      AND m.source_type = j.actor_type AND m.source_id = j.actor_id);
    IF j.mode = 'delete' THEN
        DELETE FROM work_journal r
        WHERE r.seq > v_lo AND r.seq <= v_hi AND r.tenant_id = j.tenant_id AND r.message_id = ANY (v_mine);
    ELSE
        UPDATE work_journal r
        SET correlation_id = NULL, payload = CASE WHEN r.payload IS NOT NULL THEN work_gdpr_marker() END
        WHERE r.seq > v_lo AND r.seq <= v_hi AND r.tenant_id = j.tenant_id AND r.message_id = ANY (v_mine);
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    UPDATE work_journal r
    SET actor_type = CASE WHEN r.actor_type = j.actor_type AND r.actor_id = j.actor_id THEN 'redacted'
                          ELSE r.actor_type END,
        actor_id = CASE WHEN r.actor_type = j.actor_type AND r.actor_id = j.actor_id THEN 'redacted'
                        ELSE r.actor_id END,
        payload = CASE WHEN r.payload IS NOT NULL THEN work_gdpr_marker() END
    WHERE r.seq > v_lo AND r.seq <= v_hi AND r.tenant_id = j.tenant_id
      AND ((r.actor_type = j.actor_type AND r.actor_id = j.actor_id) OR r.payload->>'claimed_by' = j.actor_id);
    GET DIAGNOSTICS v_more = ROW_COUNT;
    n := n + v_more;
    last := CASE WHEN v_hi >= work_journal_last_seq() THEN NULL ELSE v_hi::text END;
END $$;

CREATE FUNCTION work_gdpr_export_audit(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_lo bigint := coalesce(p_after::bigint, 0);
    v_hi bigint := coalesce(p_after::bigint, 0) + p_limit;
BEGIN
    n := work_gdpr_export_part(j.id, ARRAY(
        SELECT jsonb_build_object('record', 'audit', 'event_type', r.event_type, 'at', r.at,
                                  'scope_id', r.scope_id, 'resource_type', r.resource_type,
                                  'resource_id', coalesce(r.resource_id, r.message_id::text),
                                  'correlation_id', r.correlation_id, 'outcome', r.outcome, 'details', r.payload)
        FROM work_journal r
        WHERE r.seq > v_lo AND r.seq <= v_hi AND r.tenant_id = j.tenant_id
          AND r.actor_type = j.actor_type AND r.actor_id = j.actor_id
        ORDER BY r.seq));
    last := CASE WHEN v_hi >= work_journal_last_seq() THEN NULL ELSE v_hi::text END;
END $$;
