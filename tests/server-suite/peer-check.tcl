# Loaded by scripts/server-suite.sh into the server's own test framework,
# after its support files: every `test` is followed by a check that the
# linked peer holds what the node under test holds.
#
#   RDMASYNC_PEER_HOST / RDMASYNC_PEER_PORT   the other node
#   RDMASYNC_CHECK_LOG                        where differences are written
#   RDMASYNC_CHECK_WAIT_MS                    how long the peer may take
#
# Equal means: DEBUG DIGEST equal (every database, values and expiries;
# keys that expired on the peer but are not deleted yet are deleted by a
# SCAN of the peer first, as any read would delete them),
# the same function libraries (name and code), and for every stream (whose consumer groups DEBUG DIGEST leaves out) the
# same DUMP on both nodes. A stream whose only difference is its consumers'
# seen-times is reported as such ("seen-time only"): a reload from an AOF
# without an RDB preamble recreates consumers with the time of the load on
# that node alone, as it would against a replica. Against a plain server the runner points the
# "peer" at the server itself, so that both runs send the same commands.

rename test rdmasync_framework_test

# The client constructor: `redis` in Redis's framework, `valkey` in Valkey's.
proc rdmasync_client {host port} {
    if {[info commands valkey] ne ""} { return [valkey $host $port 0 $::tls] }
    return [redis $host $port 0 $::tls]
}

proc test {name code {okpattern undefined} {tags {}}} {
    uplevel 1 [list rdmasync_framework_test $name $code $okpattern $tags]
    rdmasync_check_peer $name
}

# The streams of every database holding keys, as {db key} pairs.
proc rdmasync_streams {r} {
    set found {}
    foreach line [split [$r info keyspace] "\n"] {
        if {![regexp {^db([0-9]+):} $line -> db]} continue
        $r select $db
        set cursor 0
        while 1 {
            lassign [$r scan $cursor count 1000 type stream] cursor keys
            foreach k $keys { lappend found [list $db $k] }
            if {$cursor == 0} break
        }
    }
    return [lsort -unique $found]
}

# XINFO STREAM FULL of a stream without its consumers' seen and active
# times: what is left when those are all that differ.
proc rdmasync_stream_sans_times {r key} {
    set full [$r xinfo stream $key full]
    regsub -all {(seen-time|active-time) [0-9]+} $full {\1 _} full
    return $full
}

# The function libraries, as sorted {name code} pairs (their order in
# FUNCTION LIST is the server's hash order).
proc rdmasync_libraries {r} {
    set libs {}
    foreach lib [$r function list withcode] {
        set d [dict create {*}$lib]
        lappend libs [list [dict get $d library_name] [dict get $d library_code]]
    }
    return [lsort $libs]
}

# A node's apply errors, refusals and last error, from RDMASYNC.STATUS.
proc rdmasync_errors {r} {
    set status [$r rdmasync.status]
    set out {}
    foreach field {link apply_errors entries_refused entries_applied conflicts_discarded entries_sent queue_overflows lag_entries backlog full_syncs sync_in_progress last_error} {
        set at [lsearch -exact $status $field]
        if {$at >= 0} { lappend out "$field=[lindex $status [expr {$at + 1}]]" }
    }
    return [join $out " "]
}

# Which libraries differ between two lists of {name code}: up to three
# names, each with where it is.
proc rdmasync_library_difference {la lb} {
    set codes [dict create]
    foreach lib $la { dict set codes [lindex $lib 0] [list a [lindex $lib 1]] }
    foreach lib $lb {
        lassign $lib name code
        if {![dict exists $codes $name]} {
            dict set codes $name [list b $code]
        } elseif {[lindex [dict get $codes $name] 1] eq $code} {
            dict unset codes $name
        } else {
            dict set codes $name [list both {}]
        }
    }
    set found {}
    foreach name [lsort [dict keys $codes]] {
        set where [dict get {a "only on the node" b "only on the peer" both "code differs"} [lindex [dict get $codes $name] 0]]
        lappend found "$name $where"
        if {[llength $found] >= 3} break
    }
    return [join $found "; "]
}

# The keys of every database holding keys, as {db key} pairs (at most
# `limit` per node).
proc rdmasync_keys {r limit} {
    set found {}
    foreach line [split [$r info keyspace] "\n"] {
        if {![regexp {^db([0-9]+):} $line -> db]} continue
        $r select $db
        set cursor 0
        while {[llength $found] < $limit} {
            lassign [$r scan $cursor count 1000] cursor keys
            foreach k $keys { lappend found [list $db $k] }
            if {$cursor == 0} break
        }
    }
    return $found
}

# Which keys make two digests differ: up to three, each "db:key" with
# what differs (only on one node, its value, or its expiry). Reading a key
# may expire it: called once the check has given up waiting.
proc rdmasync_differing_keys {a b} {
    set keys [lsort -unique [concat [rdmasync_keys $a 10000] [rdmasync_keys $b 10000]]]
    set found {}
    foreach k $keys {
        lassign $k n key
        $a select $n
        $b select $n
        set ea [$a exists $key]
        set eb [$b exists $key]
        if {$ea != $eb} {
            set why [expr {$ea ? "only on the node" : "only on the peer"}]
        } elseif {[$a debug digest-value $key] ne [$b debug digest-value $key]} {
            set why "value differs"
        } elseif {[$a pexpiretime $key] != [$b pexpiretime $key]} {
            set why "expiry [$a pexpiretime $key] vs [$b pexpiretime $key]"
        } else continue
        lappend found "db$n:$key $why"
        if {[llength $found] >= 3} break
    }
    return [join $found "; "]
}

# What differs between the two nodes now ("" when nothing).
proc rdmasync_difference {a b} {
    set da [$a debug digest]
    set db [$b debug digest]
    if {$da ne $db} { return "digest $da vs $db" }
    set la [rdmasync_libraries $a]
    set lb [rdmasync_libraries $b]
    if {$la ne $lb} {
        return "function libraries differ ([rdmasync_library_difference $la $lb])"
    }
    set streams [lsort -unique [concat [rdmasync_streams $a] [rdmasync_streams $b]]]
    foreach s $streams {
        lassign $s n key
        $a select $n
        $b select $n
        if {[$a dump $key] eq [$b dump $key]} continue
        if {[rdmasync_stream_sans_times $a $key] eq [rdmasync_stream_sans_times $b $key]} {
            return "seen-time only: stream db$n $key"
        }
        return "stream db$n $key: DUMP differs"
    }
    return ""
}

proc rdmasync_check_peer {name} {
    if {![info exists ::env(RDMASYNC_PEER_PORT)]} return
    set wait [expr {[info exists ::env(RDMASYNC_CHECK_WAIT_MS)] ? $::env(RDMASYNC_CHECK_WAIT_MS) : 5000}]
    set diff ""
    if {[catch {srv 0 host}]} {
        # A test that starts servers of its own has no node to check.
        set diff "not checked: the test ran its own servers"
    } elseif {[catch {
        set a [rdmasync_client [srv 0 host] [srv 0 port]]
        set b [rdmasync_client $::env(RDMASYNC_PEER_HOST) $::env(RDMASYNC_PEER_PORT)]
        set start [clock milliseconds]
        set scanned 0
        while 1 {
            # Measured before the comparison, so that the last comparison
            # starts after the wait ran out: reading 50,000 libraries can
            # take the client seconds, and a list read before the peer
            # applied a change must not be the verdict.
            set waited [expr {[clock milliseconds] - $start}]
            set diff [rdmasync_difference $a $b]
            # After a storm of FUNCTION LOADs (unit/functions: 30,000 with
            # flushes between) the peer applies each set the writer shipped,
            # a few seconds behind it.
            set limit [expr {[string match "function libraries differ*" $diff] ? 3 * $wait : $wait}]
            if {$diff eq "" || $waited > $limit} break
            # Left by an earlier test's reload: no need to wait it out.
            if {[string match "seen-time only*" $diff] && $waited > 500} break
            # DEBUG DIGEST covers keys that expired but were not deleted
            # yet. The node under test deletes one when a command reads it
            # (GETEX); the peer, only when its active expiry samples it:
            # among 10,000 keys with a TTL that can take a minute. A SCAN
            # of the peer deletes them as any read would.
            if {[string match "digest *" $diff] && !$scanned && $waited > 200} {
                rdmasync_keys $b 100000000
                set scanned 1
                continue
            }
            after 20
        }
        # Named once the wait is over (reading keys can expire them).
        if {[string match "digest *" $diff]} {
            # INFO keyspace counts keys that expired but were not deleted
            # yet (DEBUG DIGEST covers them; SCAN deletes them).
            set spaces [list [$a info keyspace] [$b info keyspace]]
            regsub -all {\s+} $spaces " " spaces
            if {[catch {rdmasync_differing_keys $a $b} keys]} { set keys "keys not listed: $keys" }
            append diff " (keyspace [lindex $spaces 0] vs [lindex $spaces 1]; $keys)"
        }
        if {[string match "function libraries differ*" $diff]} {
            append diff " ([rdmasync_errors $a] vs [rdmasync_errors $b])"
        }
        $a close
        $b close
    } err]} {
        set diff "check failed: $err"
    }
    if {$diff ne ""} {
        regsub {^tests/(.*)\.tcl$} $::curfile {\1} file
        set fd [open $::env(RDMASYNC_CHECK_LOG) a]
        puts $fd "$file\t$name\t$diff"
        close $fd
    }
}
